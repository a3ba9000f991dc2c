// Package frontend is the gateway's HTTP front end: the Kubernetes REST
// surface. For every request it authenticates the caller, resolves what the
// request addresses (requestinfo), negotiates media types, takes seats from
// the flow-control service, and then either answers itself (health,
// /version, discovery) or rewrites the request onto the unambiguous internal
// routes of meridian.api.v1.ResourceService and hands it to grpc-gateway,
// which calls the ResourceService over gRPC or in process (a get of an
// in-process ResourceService skips grpc-gateway's routing: localget.go).
package frontend

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"github.com/meridian-cp/meridian/lib/growstack"
	"github.com/meridian-cp/meridian/lib/healthz"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/telemetry"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/audit"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authn"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authn/serviceaccount"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authz"
	"github.com/meridian-cp/meridian/services/apigateway/internal/discovery"
	"github.com/meridian-cp/meridian/services/apigateway/internal/fieldmanager"
	"github.com/meridian-cp/meridian/services/apigateway/internal/flowcontrolclient"
	"github.com/meridian-cp/meridian/services/apigateway/internal/openapi"
	"github.com/meridian-cp/meridian/services/apigateway/internal/requestinfo"
	"github.com/meridian-cp/meridian/services/apigateway/internal/resources"
	"github.com/meridian-cp/meridian/services/apigateway/internal/watchpark"
	"github.com/meridian-cp/meridian/services/apigateway/internal/worksize"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Config configures a Handler.
type Config struct {
	// Registry is the set of served resources. Required.
	Registry *registry.Registry
	// Authenticator authenticates callers. Required.
	Authenticator *authn.Authenticator
	// Anonymous is what becomes of requests without credentials; the zero
	// value admits them to the public paths only.
	Anonymous authn.AnonymousPolicy
	// Authorizer decides every request, impersonation included, before
	// flow control admits it (authz.RBAC; authz.AlwaysAllow for none).
	// Required.
	Authorizer authz.Authorizer
	// Resources is a client of a remote ResourceService. Required unless
	// LocalResources is set.
	Resources apiv1.ResourceServiceClient
	// LocalResources is a ResourceService in this process: unary methods
	// are served by direct calls (gets without grpc-gateway's routing,
	// serveLocalGet), watches on the request's goroutine (serveLocalWatch)
	// and lists through inproc.Stream, with no gRPC hop.
	// It takes precedence over Resources.
	LocalResources apiv1.ResourceServiceServer
	// FlowControl hands out seats; nil serves every request at once.
	FlowControl *flowcontrolclient.Client
	// WorkSize estimates the seats of lists and writes and counts the
	// watches served; nil makes every request one seat.
	WorkSize *worksize.Tracker
	// Livez, Readyz and Healthz are the checks of /livez, /readyz and
	// /healthz beyond "ping". kube-apiserver's meanings: /livez fails only
	// when the process must be restarted, /readyz when it should get no
	// traffic (a required dependency is unreachable, it is shutting
	// down), /healthz (deprecated) is /readyz without the shutdown check.
	Livez, Readyz, Healthz []healthz.Check
	// ServiceAccounts issues service account tokens (TokenRequest) and
	// serves the issuer's discovery documents; nil: neither is served.
	ServiceAccounts *serviceaccount.Tokens
	// Metrics serves /metrics to authenticated callers; nil: 404.
	Metrics http.Handler
	// Registerer receives the request metrics; nil: none.
	Registerer prometheus.Registerer
	// MaxRequestBytes bounds request bodies; 0 means
	// resources.MaxRequestBytes, the bound of the gRPC front door too.
	MaxRequestBytes int64
	// Logger logs; nil means slog.Default().
	Logger *slog.Logger
	// RequestLogLevel is the level of the one log line per request
	// (audit id, user, verb, resource, code, latency, flow schema); nil
	// means debug.
	RequestLogLevel slog.Leveler
	// Auditor writes audit events; nil audits nothing (and costs a nil
	// check per request).
	Auditor *audit.Auditor
}

// Handler is the REST front end. It is safe for concurrent use.
type Handler struct {
	cfg       Config
	gw        *runtime.ServeMux // watches; everything when local is nil
	local     *runtime.ServeMux // unary methods by direct call
	discovery *discovery.Documents
	openapi   *openapi.Documents
	openapiV2 *openapi.V2
	health    map[string]*healthz.Handler
	metrics   *metrics
	authn     *authn.Metrics
	gzip      gzipWriters
	reviews   *reviewCodec
	// resumer runs the resumptions of parked watches (watchpark).
	resumer *watchpark.Runner
}

// New builds the front end and registers the ResourceService routes.
func New(ctx context.Context, cfg Config) (*Handler, error) {
	if cfg.LocalResources != nil {
		cfg.Resources = localClient{srv: cfg.LocalResources}
	}
	if cfg.Registry == nil || cfg.Authenticator == nil || cfg.Authorizer == nil || cfg.Resources == nil {
		return nil, errors.New("frontend: Registry, Authenticator, Authorizer and Resources or LocalResources are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxRequestBytes == 0 {
		cfg.MaxRequestBytes = resources.MaxRequestBytes
	}
	hm, err := healthz.NewMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	h := &Handler{
		cfg:       cfg,
		discovery: discovery.New(cfg.Registry),
		resumer:   watchpark.NewRunner(cfg.Logger, 0),
		health: map[string]*healthz.Handler{
			"/livez":   healthz.New("/livez", hm, cfg.Livez...),
			"/readyz":  healthz.New("/readyz", hm, cfg.Readyz...),
			"/healthz": healthz.New("/healthz", hm, cfg.Healthz...),
		},
	}
	oa, err := openapi.New(cfg.Registry, discovery.Version.GitVersion)
	if err != nil {
		return nil, err
	}
	h.openapi = oa
	if h.reviews, err = newReviewCodec(); err != nil {
		return nil, err
	}
	if h.openapiV2, err = openapi.NewV2(cfg.Registry, discovery.Version.GitVersion); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	h.metrics = m
	if h.authn, err = authn.NewMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	h.gw = newGatewayMux()
	if err := apiv1.RegisterResourceServiceHandlerClient(ctx, h.gw, cfg.Resources); err != nil {
		return nil, fmt.Errorf("frontend: register routes: %w", err)
	}
	if cfg.LocalResources != nil {
		h.local = newGatewayMux()
		if err := apiv1.RegisterResourceServiceHandlerServer(ctx, h.local, cfg.LocalResources); err != nil {
			return nil, fmt.Errorf("frontend: register local routes: %w", err)
		}
	}
	return h, nil
}

// ServeHTTP serves one request. It never panics: a panic below becomes a
// 500 Status.
//
// Each request runs on a new goroutine (h2conn's or net/http's); its
// stack is grown to a handler's depth in one copy (package growstack)
// first thing, while it holds ServeHTTP's small frame only: serveHTTP's
// frame alone would make the runtime grow it once more before. Writes go deeper: their
// managed-fields update. A watch's goroutine is not grown: over HTTP/1.1
// it lives as long as the watch, mostly idle, and a stack grown ahead
// would be memory every idle watch holds until collections shrink it.
//
// A watch over HTTP/2 parks while idle (watchpark, handoff): its handler
// returns with the stream open, and what the handler's frames do as they
// return (the request's metrics, audit completion and log line, the
// watch gauge, the seats' release) waits for the watch's end.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case mayWatch(r):
	case r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch:
		growstack.GrowLarge()
	default:
		growstack.Grow()
	}
	h.serveHTTP(w, r)
}

// mayWatch reports whether r may be a watch (requestinfo: a /watch/ path,
// or a true watch parameter) without parsing its query: a path with
// "/watch" in it, or a query with "watch" or an escape in it.
func mayWatch(r *http.Request) bool {
	return strings.Contains(r.URL.Path, "/watch") || strings.Contains(r.URL.RawQuery, "watch") || strings.Contains(r.URL.RawQuery, "%")
}

// serveHTTP is ServeHTTP once the stack is grown.
func (h *Handler) serveHTTP(w http.ResponseWriter, r *http.Request) {
	info := requestinfo.New(r.Method, r.URL)
	start := time.Now()
	pk := h.parkable(w, &info)
	var rec *recorder
	var ho *watchpark.Handoff
	if pk != nil {
		rec, ho = &pk.rec, &pk.ho
	} else {
		rec = &recorder{}
	}
	rec.ResponseWriter = w
	id := setAuditID(w, r)
	labels := labels(r, &info)
	if ho != nil {
		r = r.WithContext(watchpark.With(r.Context(), ho))
		defer returned(w, ho)
	}
	defer ho.Defer(h.metrics.begin(labels.verb))
	ctx, rl := withRequestLog(r.Context(), h.cfg.Logger, h.requestLogLevel())
	if rl != nil {
		r = r.WithContext(ctx)
	}
	nameRequestSpan(r.Context(), labels.verb, &info, id)
	var rt route
	var ev *audit.Request
	defer func() {
		if p := recover(); p != nil {
			ev.Panic(fmt.Sprintf("APIServer panic'd on %s %s: %v", r.Method, r.URL.Path, p))
			if p == http.ErrAbortHandler {
				panic(p)
			}
			h.cfg.Logger.Error("panic serving request", "method", r.Method, "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
			if !rec.wroteHeader {
				writeStatus(rec, apierrors.NewInternalError(fmt.Errorf("panic: %v", p)).ErrStatus)
			}
		}
		if ho.Parked() {
			// The watch goes on: its request is done with at its end.
			h.deferDone(r.Context(), pk, labels, rt, ev, rl, id, &info, start)
			return
		}
		h.done(r.Context(), rec, labels, rt, ev, rl, id, &info, start)
	}()
	h.serve(rec, r, &info, &rt, id, &ev)
}

// done is what every request ends with: its audit event completed, its
// metrics, its status on the trace, its log line. info is read only for
// the log line (rl not nil).
func (h *Handler) done(ctx context.Context, rec *recorder, labels requestLabels, rt route, ev *audit.Request, rl *requestLog, id string, info *requestinfo.Info, start time.Time) {
	ev.Complete(rec.code())
	h.metrics.observe(labels, rt, rec.code(), time.Since(start), rec.written)
	telemetry.HTTPStatus(ctx, rec.code())
	if rl != nil {
		h.logRequest(ctx, rl, id, labels.verb, *info, rec.code(), time.Since(start))
	}
}

// parked is a request that may park (a watch whose response can outlive
// its handler, parkable): its Handoff, its response's recorder and, once
// it parked, what done reads at its end, in one record for as long as the
// watch lasts.
type parked struct {
	ho  watchpark.Handoff
	rec recorder

	// Set by deferDone: done's arguments.
	h      *Handler
	ctx    context.Context
	labels requestLabels
	rt     route
	ev     *audit.Request
	rl     *requestLog
	id     string
	info   *requestinfo.Info
	start  time.Time
}

// done is done for a parked watch, at its end.
func (p *parked) done() {
	p.h.done(p.ctx, &p.rec, p.labels, p.rt, p.ev, p.rl, p.id, p.info, p.start)
}

// deferDone has a parked watch's request done with (done) at the watch's
// end. What p keeps is what done reads: the request's Audit-Id and path
// parts (info) only when its log line is written (rl), as no other part
// of done reads them.
func (h *Handler) deferDone(ctx context.Context, p *parked, labels requestLabels, rt route, ev *audit.Request, rl *requestLog, id string, info *requestinfo.Info, start time.Time) {
	p.h, p.ctx, p.labels, p.rt, p.ev, p.rl, p.start = h, ctx, labels, rt, ev, rl, start
	if rl != nil {
		c := *info
		p.id, p.info = id, &c
	}
	p.ho.Defer(p.done)
}

// parkable returns the record of a watch of the in-process ResourceService
// whose response can outlive its handler (an HTTP/2 stream of h2conn), or
// nil: such a watch parks while idle, holding no goroutine (watchpark).
// Watches over HTTP/1.1 wait on their handler's goroutine.
func (h *Handler) parkable(w http.ResponseWriter, info *requestinfo.Info) *parked {
	if info.Verb != "watch" || h.cfg.LocalResources == nil || detacher(w) == nil {
		return nil
	}
	p := &parked{}
	p.ho.Init(h.resumer)
	return p
}

// detachable is a ResponseWriter that can outlive its handler
// (h2conn's).
type detachable interface {
	Detach() (end func(abort bool))
}

// detacher finds the detachable writer under w's wrappers, or nil.
func detacher(w http.ResponseWriter) detachable {
	for {
		switch t := w.(type) {
		case detachable:
			return t
		case interface{ Unwrap() http.ResponseWriter }:
			w = t.Unwrap()
		default:
			return nil
		}
	}
}

// returned runs last as a watch's handler returns: a parked watch's
// response is detached from the handler, to be ended with the watch.
func returned(w http.ResponseWriter, ho *watchpark.Handoff) {
	var end func(abort bool)
	if ho.Parked() {
		end = detacher(w).Detach()
	}
	ho.Returned(end)
}

// serve serves a request; it sets *rt to the route the request reached,
// for the metrics, and *ev to the request's audit event when the audit
// policy audits it (id is its Audit-Id). Nothing reads the request's body
// before the caller is authenticated.
//
// A watch stays on this goroutine's stack for as long as it lasts, idle
// most of the time, and collections shrink a goroutine's stack only while
// it uses under a quarter of it. So the functions a watch waits under
// keep small frames: authentication (admit) and the routes other than
// resources (serveOther) run in functions of their own that have returned
// before the watch starts, and serve itself holds little.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, info *requestinfo.Info, rt *route, id string, ev **audit.Request) {
	w, r, requestor, ok := h.admit(w, r, info, id, ev)
	if !ok {
		return
	}
	if h.serveOther(w, r, info, rt, &requestor) {
		return
	}
	h.serveResource(w, r, info, rt)
}

// admit authenticates and authorizes a request, as serve's first step.
// It returns the writer and request to go on with (audited, with the
// caller's identity in the context) and the requestor, or ok false once
// it has answered the request.
func (h *Handler) admit(w http.ResponseWriter, r *http.Request, info *requestinfo.Info, id string, ev **audit.Request) (_ http.ResponseWriter, _ *http.Request, _ identity.User, ok bool) {
	var received time.Time
	if h.cfg.Auditor != nil {
		received = time.Now()
	}
	_, authSpan := telemetry.StartSpan(r.Context(), telemetry.ScopeGateway, "authenticate")
	u, ok, err := h.cfg.Authenticator.Authenticate(authn.Credentials{TLS: r.TLS, Authorization: r.Header.Get("Authorization")})
	if authSpan.IsRecording() {
		authSpan.SetAttributes(attrAuthOK.Bool(ok), attrUser.String(u.Name))
		authSpan.End()
	}
	if err != nil || (!ok && !h.cfg.Anonymous.Admits(r.URL.Path)) {
		h.authn.Observe(ok, err)
		if h.cfg.Auditor != nil {
			// As kube-apiserver audits a failed authentication: no user.
			if *ev = h.beginAudit(r, *info, identity.User{}, id, received); *ev != nil {
				w = &auditWriter{ResponseWriter: w, ev: *ev}
			}
		}
		writeStatus(w, metav1.Status{Code: http.StatusUnauthorized, Reason: metav1.StatusReasonUnauthorized, Message: "Unauthorized"})
		return nil, nil, identity.User{}, false
	}
	requestor := authn.Anonymous()
	if ok {
		h.authn.Observe(ok, err)
		requestor = u
	}
	noteUser(r.Context(), requestor.Name)
	if h.cfg.Auditor != nil {
		if *ev = h.beginAudit(r, *info, requestor, id, received); *ev != nil {
			w = &auditWriter{ResponseWriter: w, ev: *ev}
			r = r.WithContext(audit.WithRequest(r.Context(), *ev))
		}
	}
	// The Authorization and Impersonate-* headers have done their work;
	// they go no further.
	r.Header.Del("Authorization")
	as, impersonated, err := authn.Impersonate(r.Context(), h.cfg.Authorizer, requestor, r.Header)
	for k := range r.Header {
		if strings.HasPrefix(k, "Impersonate-") {
			r.Header.Del(k)
		}
	}
	if err != nil {
		writeStatus(w, toStatus(err))
		return nil, nil, identity.User{}, false
	}
	if impersonated {
		requestor = as
		noteUser(r.Context(), as.Name)
		(*ev).SetImpersonatedUser(as)
	}
	// An anonymous request that got this far acts as system:anonymous
	// from here on, as with kube-apiserver.
	ctx := r.Context()
	if info.Verb != "watch" {
		// Only writes read it (managed fields); a watch would keep it
		// for its life.
		ctx = fieldmanager.WithUserAgent(ctx, r.Header.Get("User-Agent"))
	}
	r = r.WithContext(identity.WithUser(ctx, requestor))
	if !h.authorize(w, r, *info, requestor) {
		return nil, nil, identity.User{}, false
	}
	return w, r, requestor, true
}

// serveOther serves the requests that do not go to serveResource: health,
// reviews, token requests, the issuer's discovery, /version, APF's debug
// endpoints, /metrics, discovery and OpenAPI, and 404 for other
// non-resource paths. It reports false for a request of a resource's,
// which it leaves to serveResource.
func (h *Handler) serveOther(w http.ResponseWriter, r *http.Request, info *requestinfo.Info, rt *route, requestor *identity.User) bool {
	if !info.IsResourceRequest {
		// Non-resource requests (health, /version, /metrics, discovery,
		// OpenAPI, the APF debug endpoints) are flow-controlled as
		// kube-apiserver's: classified by nonResourceRules, 429 when
		// their level rejects them. Probes of an exempt level are decided
		// in this process (flowcontrolclient), never waiting for the
		// flow-control service.
		seated, release, err := h.acquire(w, r, *info)
		if err != nil {
			writeStatus(w, toStatus(err))
			return true
		}
		defer release()
		r = seated
	}
	path := r.URL.Path
	for prefix, hh := range h.health {
		if path == prefix || strings.HasPrefix(path, prefix+"/") {
			if path == prefix {
				*rt = pathRoute(prefix, "")
			}
			hh.ServeHTTP(w, r)
			return true
		}
	}
	switch {
	case isAccessReview(*info):
		h.serveAccessReview(w, r, *info, *requestor)
		return true
	case isTokenRequest(*info):
		*rt = resourceRoute(*info)
		h.serveTokenRequest(w, r, *info)
		return true
	case isTokenReview(*info):
		*rt = resourceRoute(*info)
		h.serveTokenReview(w, r, *info)
		return true
	case path == serviceaccount.OpenIDConfigPath || path == serviceaccount.JWKSPath:
		*rt = pathRoute(path, "apiserver")
		h.serveIssuerDiscovery(w, r)
		return true
	case path == selfSubjectReviewPath:
		*rt = selfSubjectReviewRoute
		serveSelfSubjectReview(w, r, *requestor)
		return true
	case path == "/version" || path == "/version/":
		writeJSON(w, discovery.Version)
		return true
	case strings.HasPrefix(path, apfDebugPrefix) && h.serveAPFDebug(w, r):
		return true
	case path == "/metrics":
		if h.cfg.Metrics != nil {
			h.cfg.Metrics.ServeHTTP(w, r)
			return true
		}
	case !info.IsResourceRequest:
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			if (path == "/api" || path == "/apis") && wantsAggregated(r.Header.Get("Accept")) {
				*rt = pathRoute(path, "apiserver")
				w.Header().Set("Content-Type", discovery.AggregatedMediaType)
				w.Header().Set("Vary", "Accept")
				_ = json.NewEncoder(w).Encode(h.discovery.Aggregated(path == "/api"))
				return true
			}
			if doc, found := h.discovery.Lookup(path, r); found {
				writeJSON(w, doc)
				return true
			}
			if path == "/openapi/v2" || path == "/openapi/v2/" {
				proto := strings.Contains(r.Header.Get("Accept"), "protobuf")
				doc, err := h.openapiV2.JSON()
				if proto {
					doc, err = h.openapiV2.Protobuf()
				}
				if err != nil {
					writeStatus(w, apierrors.NewInternalError(err).ErrStatus)
					return true
				}
				if proto {
					w.Header().Set("Content-Type", openapi.V2ProtobufMediaType)
				} else {
					w.Header().Set("Content-Type", "application/json")
				}
				_, _ = w.Write(doc)
				return true
			}
			if path == "/openapi/v3" {
				*rt = pathRoute("openapi/v3", "")
			} else if strings.HasPrefix(path, "/openapi/v3/") {
				*rt = pathRoute("openapi/v3/", "")
			}
			if doc, found := h.openapi.Lookup(path); found {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write(doc)
				return true
			}
		}
	default:
		return false
	}
	writeStatus(w, apierrors.NewNotFound(schema.GroupResource{}, "").ErrStatus)
	return true
}

// wantsAggregated reports whether an Accept header prefers the aggregated
// discovery document (apidiscovery.k8s.io/v2 APIGroupDiscoveryList) over
// the legacy one.
func wantsAggregated(accept string) bool {
	mt, ok := negotiation.Negotiate(accept, negotiation.Options{
		Types: []string{negotiation.JSON},
		AcceptParams: func(_ string, p map[string]string) bool {
			if _, as := p["as"]; !as {
				return len(p) == 0
			}
			return p["as"] == "APIGroupDiscoveryList" && p["g"] == "apidiscovery.k8s.io" && p["v"] == "v2"
		},
	})
	return ok && mt.Params["as"] == "APIGroupDiscoveryList"
}

// serveResource serves a resource request through the ResourceService; it
// sets *rt once the request names a served resource and a verb it serves.
// A watch waits under this frame for as long as it lasts (see serve): what
// only other requests need is in forward, and the error answers are
// written by functions of their own.
func (h *Handler) serveResource(w http.ResponseWriter, r *http.Request, info *requestinfo.Info, rt *route) {
	if !h.servesResource(w, r, info, rt) {
		return
	}
	ho := watchpark.From(r.Context())
	if info.Verb == "watch" {
		stopGauge, stopCharge := h.watching(info, rt)
		defer ho.Defer(stopGauge)
		defer ho.Defer(stopCharge)
	}
	r, release, ok := h.admitResource(w, r, info)
	if !ok {
		return
	}
	// Seats go back once the response is written, on every path (a panic
	// below included), or a watch's once its initial events are sent
	// (release runs once). release only queues the grant: the
	// flow-control round trip never holds the end of the response. A
	// parked watch's go back at its end at the latest.
	defer ho.Defer(release)
	if info.Verb == "watch" && h.cfg.LocalResources != nil {
		serveLocalWatch(&streamErrorWriter{ResponseWriter: w}, r, h.cfg.LocalResources)
		return
	}
	h.forward(w, r, info)
}

// watching counts a watch of route rt in the long-running requests'
// gauge, and charges the writes of its resource for notifying it; the
// functions returned undo each.
func (h *Handler) watching(info *requestinfo.Info, rt *route) (stopGauge, stopCharge func()) {
	stopGauge = h.metrics.watching(requestLabels{verb: "WATCH"}, *rt)
	stopCharge = h.cfg.WorkSize.Watching(schema.GroupResource{Group: info.APIGroup, Resource: info.Resource}, info.Namespace)
	return stopGauge, stopCharge
}

// servesResource reports whether the request names a served resource
// (and subresource) and a verb it serves, and sets *rt then; else it
// answers 404 or 405.
func (h *Handler) servesResource(w http.ResponseWriter, r *http.Request, info *requestinfo.Info, rt *route) bool {
	gvr := schema.GroupVersionResource{Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource}
	res, ok := h.cfg.Registry.Lookup(gvr)
	if !ok || (info.Subresource != "" && !res.HasSubresource(info.Subresource)) || (!res.Namespaced && info.Namespace != "" && info.Resource != "namespaces") {
		writeStatus(w, metav1.Status{Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
			Message: "the server could not find the requested resource", Details: &metav1.StatusDetails{}})
		return false
	}
	if info.Verb == "" || !allowed(res, info.Subresource, info.Verb) {
		writeStatus(w, apierrors.NewMethodNotSupported(gvr.GroupResource(), strings.ToLower(r.Method)).ErrStatus)
		return false
	}
	*rt = resourceRoute(*info)
	return true
}

// admitResource takes the request's flow-control seats and rewrites it
// for the ResourceService (rewrite). It returns the request to serve and
// the seats' release, or ok false once it has answered the request (with
// the seats given back).
func (h *Handler) admitResource(w http.ResponseWriter, r *http.Request, info *requestinfo.Info) (_ *http.Request, release func(), ok bool) {
	// Seats are taken before the body is read, as kube-apiserver's flow
	// control comes before its handlers: a slow upload occupies its own
	// priority level's seats, not the server.
	r, release, err := h.acquire(w, r, *info)
	if err != nil {
		writeStatus(w, toStatus(err))
		return nil, nil, false
	}
	if err := h.rewrite(r, *info); err != nil {
		release()
		writeStatus(w, toStatus(err))
		return nil, nil, false
	}
	return r, release, true
}

// forward serves an admitted resource request other than a watch of the
// in-process ResourceService, through grpc-gateway's muxes, or a get of
// the in-process ResourceService by a direct call (serveLocalGet); a get
// or list answer is compressed when the client accepts gzip.
func (h *Handler) forward(w http.ResponseWriter, r *http.Request, info *requestinfo.Info) {
	var gz *gzipWriter
	if (info.Verb == "get" || info.Verb == "list") && acceptsGzip(r) {
		w = wrapInsideAudit(w, func(inner http.ResponseWriter) http.ResponseWriter {
			gz = &gzipWriter{ResponseWriter: inner, writers: &h.gzip}
			return gz
		})
		defer gz.Close()
	}
	if info.Verb == "list" && gz != nil {
		// A list relayed from watchfanout may come compressed already.
		r = r.WithContext(resources.WithGzipSink(r.Context(), gz))
	}
	if info.Verb == "list" || info.Verb == "watch" {
		// Server streams: only the client mux streams.
		h.gw.ServeHTTP(&streamErrorWriter{ResponseWriter: w}, r)
		return
	}
	if h.local != nil {
		if info.Verb == "get" {
			serveLocalGet(w, r, h.local, h.cfg.LocalResources)
			return
		}
		h.local.ServeHTTP(w, r)
		return
	}
	h.gw.ServeHTTP(w, r)
}

func allowed(res *registry.Resource, subresource, verb string) bool {
	verbs := res.Verbs
	if subresource != "" {
		verbs = []string{"get", "patch", "update"}
	}
	for _, v := range verbs {
		if v == verb {
			return true
		}
	}
	return false
}

// resourceParams are the query parameters of the Kubernetes API that the
// ResourceService reads; nothing else from the client's query reaches it.
var resourceParams = []string{
	"resourceVersion", "resourceVersionMatch", "labelSelector", "fieldSelector", "limit", "continue",
	"allowWatchBookmarks", "sendInitialEvents", "timeoutSeconds", "includeObject",
	"dryRun", "fieldManager", "fieldValidation", "force", "gracePeriodSeconds", "propagationPolicy",
}

// refParams are the query parameters of the ResourceService's internal
// routes that name the resource (rewrite sets them from the request's
// path), in the order rewrite fills them.
var refParams = [...]string{"ref.group", "ref.version", "ref.resource", "ref.namespace", "ref.name", "ref.subresource"}

// bodyTypes are the request body media types each verb accepts.
var bodyTypes = map[string][]string{
	"create":           {negotiation.JSON, negotiation.YAML, negotiation.Protobuf},
	"update":           {negotiation.JSON, negotiation.YAML, negotiation.Protobuf},
	"delete":           {negotiation.JSON, negotiation.YAML, negotiation.Protobuf},
	"deletecollection": {negotiation.JSON, negotiation.YAML, negotiation.Protobuf},
	"patch":            {negotiation.JSONPatch, negotiation.MergePatch, negotiation.StrategicMergePatch, negotiation.ApplyPatchYAML},
}

// rewrite turns a Kubernetes resource request into a request on the
// ResourceService's internal route for its verb:
//
//	GET /api/v1/namespaces/demo/configmaps?watch=1&resourceVersion=5
//	→ GET /_meridian/v1/watch?ref.version=v1&ref.resource=configmaps&ref.namespace=demo&resourceVersion=5&accept=application/json
//
// Query parameters of the wrong type are refused here (400, checkParams),
// media types are negotiated here (406, 415), and the body is wrapped so
// that its media type reaches the ResourceService.
func (h *Handler) rewrite(r *http.Request, info requestinfo.Info) error {
	q := r.URL.Query()
	if err := checkParams(info.Verb, q); err != nil {
		return err
	}
	out := make(url.Values, len(refParams)+1+len(q))
	for _, p := range resourceParams {
		if v, ok := q[p]; ok {
			out[p] = v
		}
	}
	// The values rewrite sets share one array (each a slice of its own
	// element, capped there): what url.Values.Set makes, without a
	// slice per value.
	set := []string{info.APIGroup, info.APIVersion, info.Resource, info.Namespace, info.Name, info.Subresource, ""}
	for i, k := range refParams {
		out[k] = set[i : i+1 : i+1]
	}

	// The ResourceService negotiates the response from the Accept header
	// itself (gRPC clients send theirs too); checking here as well makes a
	// watch that can be served in no acceptable type a 406 before its
	// stream starts.
	opts := negotiation.Writes
	switch info.Verb {
	case "get", "list":
		opts = negotiation.Reads
	case "watch":
		opts = negotiation.Watches
	}
	accept := r.Header.Get("Accept")
	if _, ok := negotiation.Negotiate(accept, opts); !ok {
		return apierrors.NewGenericServerResponse(http.StatusNotAcceptable, "", schema.GroupResource{}, "",
			"none of the requested media types is served: "+strings.Join(opts.Types, ", ")+" and application/json;as=Table;g=meta.k8s.io;v=v1 are", 0, false)
	}
	set[len(refParams)] = accept
	out["accept"] = set[len(refParams):]

	if accepted, hasBody := bodyTypes[info.Verb]; hasBody && r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		header := r.Header.Get("Content-Type")
		ct, ok := negotiation.ContentType(header)
		if !ok && (info.Verb == "delete" || info.Verb == "deletecollection" ||
			(strings.TrimSpace(header) == "" && info.Verb != "patch")) {
			// A body without a media type is JSON, as kube-apiserver reads
			// it (kubectl create --raw sends none); a patch must name its
			// type.
			ct, ok = negotiation.JSON, true
		}
		if !ok || !slices.Contains(accepted, ct) {
			return apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "", schema.GroupResource{}, "",
				fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s", strings.Join(accepted, ", ")), 0, false)
		}
		// Read the (bounded) body here, so that an oversized one is a 413
		// rather than a decoding error deeper down.
		data, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, h.cfg.MaxRequestBytes))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				return apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", h.cfg.MaxRequestBytes))
			}
			return apierrors.NewBadRequest(fmt.Sprintf("reading the request body: %v", err))
		}
		r.Body = &typedBody{ReadCloser: io.NopCloser(bytes.NewReader(data)), contentType: ct}
		if h.cfg.Auditor != nil {
			audit.FromContext(r.Context()).SetRequestObject(data, ct)
		}
	}
	// grpc-gateway must not parse the body as a form.
	r.Header.Del("Content-Type")
	r.URL.Path = routePath(info.Verb)
	r.URL.RawPath = ""
	// The query reaches grpc-gateway as the parsed form it reads
	// (Request.ParseForm keeps a Form already set), rather than encoded
	// only for ParseForm to decode it again.
	r.URL.RawQuery = ""
	r.Form = out
	return nil
}

// routePaths are the ResourceService's internal routes of the verbs
// served most (routePath).
var routePaths = map[string]string{
	"get": "/_meridian/v1/get", "list": "/_meridian/v1/list", "watch": "/_meridian/v1/watch",
	"create": "/_meridian/v1/create", "update": "/_meridian/v1/update", "patch": "/_meridian/v1/patch",
	"delete": "/_meridian/v1/delete",
}

// routePath is the path of the ResourceService's internal route for verb.
func routePath(verb string) string {
	if p, ok := routePaths[verb]; ok {
		return p
	}
	return "/_meridian/v1/" + verb
}

func toStatus(err error) metav1.Status {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return se.Status()
	}
	return apierrors.NewInternalError(err).ErrStatus
}
