// Package grpcapi is the gateway's gRPC front door: meridian.api.v1.
// ResourceService for gRPC clients, with the same authentication (a client
// certificate, or a bearer token in the "authorization" metadata), the same
// impersonation (Impersonate-* metadata), the same authorization, the same
// request size limit and the same flow control as the REST surface, and
// the gRPC health service.
//
// A call is authenticated when its headers arrive (see tap), and a call
// that fails is ended before anything reads its request message (see
// guard): an unauthenticated caller cannot make the gateway hold a
// message, whatever size the message claims, nor anything else once its
// call is answered.
package grpcapi

import (
	"context"
	"errors"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/meridian-cp/meridian/lib/grpcserver"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/audit"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authn"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authz"
	"github.com/meridian-cp/meridian/services/apigateway/internal/flowcontrolclient"
	"github.com/meridian-cp/meridian/services/apigateway/internal/resources"
	"github.com/meridian-cp/meridian/services/apigateway/internal/watchinit"
	"github.com/meridian-cp/meridian/services/apigateway/internal/worksize"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/tap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// DefaultMaxConcurrentStreams is the number of concurrent calls (HTTP/2
// streams) one connection may have open when Config.MaxConcurrentStreams
// is zero: net/http's HTTP/2 default, what the REST surface allows. The
// server advertises it in its SETTINGS; a grpc-go client holds further
// calls until one of its open ones ends, so a client that keeps more
// watches open than this needs more connections.
const DefaultMaxConcurrentStreams = 250

// Config configures the gRPC front door.
type Config struct {
	// Server are the common server options (TLS, metrics, logging). Its
	// TLS must request client certificates for certificate authentication.
	// Its MaxRecvMsgSize is not used: a request message may be at most
	// resources.MaxRequestBytes, the REST surface's body limit.
	Server grpcserver.Options
	// Authenticator authenticates callers. Required.
	Authenticator *authn.Authenticator
	// Anonymous is what becomes of calls without credentials: the
	// ResourceService has no public path, so only AnonymousAuthorized
	// lets them reach the authorizer (as system:anonymous); the others
	// refuse them (Unauthenticated).
	Anonymous authn.AnonymousPolicy
	// Authorizer decides every call, impersonation included, before flow
	// control admits it. Required.
	Authorizer authz.Authorizer
	// Auditor writes the calls' audit events, as the REST surface's; nil
	// audits nothing.
	Auditor *audit.Auditor
	// FlowControl hands out seats; nil serves every call at once.
	FlowControl *flowcontrolclient.Client
	// WorkSize estimates a List's seats from the objects it will process,
	// as the REST API's; nil: one seat.
	WorkSize *worksize.Tracker
	// Resources is the ResourceService implementation. Required.
	Resources apiv1.ResourceServiceServer
	// MaxConcurrentStreams bounds the calls open at once on one
	// connection; 0 means DefaultMaxConcurrentStreams.
	MaxConcurrentStreams uint32
}

// New returns the gRPC server, not yet serving.
func New(cfg Config) (*Server, error) {
	if cfg.Authenticator == nil || cfg.Authorizer == nil || cfg.Resources == nil {
		return nil, errors.New("grpcapi: Authenticator, Authorizer and Resources are required")
	}
	cfg.Server.MaxRecvMsgSize = resources.MaxRequestBytes
	if cfg.MaxConcurrentStreams == 0 {
		cfg.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	opts, err := grpcserver.ServerOptions(cfg.Server)
	if err != nil {
		return nil, err
	}
	m, err := authn.NewMetrics(cfg.Server.Registerer)
	if err != nil {
		return nil, err
	}
	g := &gate{authn: cfg.Authenticator, anonymous: cfg.Anonymous, authz: cfg.Authorizer, auditor: cfg.Auditor, fc: cfg.FlowControl, work: cfg.WorkSize, metrics: m}
	opts = append(opts,
		grpc.InTapHandle(g.tap),
		grpc.MaxConcurrentStreams(cfg.MaxConcurrentStreams),
		grpc.ChainUnaryInterceptor(g.unary),
		grpc.ChainStreamInterceptor(g.stream),
	)
	srv := grpc.NewServer(opts...)
	srv.RegisterService(g.guard(&apiv1.ResourceService_ServiceDesc), cfg.Resources)
	hs := health.NewServer()
	hs.SetServingStatus(apiv1.ResourceService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	return &Server{Server: srv, health: hs}, nil
}

// Server is the gRPC front door: the gRPC server and its health service.
type Server struct {
	*grpc.Server
	health *health.Server
}

// Drain reports NOT_SERVING from the health service from now on, for
// every service, while calls go on being served: what /readyz reports
// once the gateway begins to shut down, so that gRPC clients that check
// health move to another gateway before the listener closes.
func (s *Server) Drain() { s.health.Shutdown() }

// gate authenticates every call (tap, guard) and takes seats for it (the
// interceptors).
type gate struct {
	authn     *authn.Authenticator
	anonymous authn.AnonymousPolicy
	authz     authz.Authorizer
	auditor   *audit.Auditor
	fc        *flowcontrolclient.Client
	work      *worksize.Tracker
	metrics   *authn.Metrics
}

// callerKey carries tap's decision, a caller, to guard and the
// interceptors. The identity interceptor of grpcserver clears
// identity.WithUser values (a user comes to a handler only from its
// decision), so the user travels under this key of our own and the
// interceptors here, which run after it, hand it on with
// identity.WithUser.
type callerKey struct{}

// caller is tap's decision on a call: the user it acts as, or why it is
// refused; for the audit event, the user it authenticated as and whether
// it impersonates user.
type caller struct {
	user          identity.User
	authenticated identity.User
	impersonated  bool
	refused       error
}

// exempt are the methods open to anyone: those of the health service.
// method is a call's path, "/service/method", which grpc-go routes by
// its service (up to the last "/") and method exactly.
func exempt(method string) bool {
	i := strings.LastIndexByte(method, '/')
	return i >= 0 && method[:i] == "/grpc.health.v1.Health"
}

// tap authenticates a call from its headers and transport, as a
// grpc.InTapHandle: grpc-go runs it when the call's headers arrive, on
// the connection's reader goroutine, before it creates the stream or reads
// any message. Authentication here is a map lookup or reading the
// certificate the TLS handshake verified, cheap enough for the reader
// goroutine.
//
// tap never fails a call: its decision — the caller, or the refusal
// (Unauthenticated, or the 400 / 403 of an impersonation) — goes in the
// returned context, and guard ends a refused call before its message is
// read. grpc-go does not cancel the context of a call its tap handle fails
// (grpc/grpc-go#2976): a grpc-timeout the client sent would keep its timer,
// and the context with it, until the deadline, hours or years away. A
// call that is answered, as a refused one is by guard, ends its context
// and leaves nothing behind.
func (g *gate) tap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if exempt(info.FullMethodName) {
		return ctx, nil
	}
	return context.WithValue(ctx, callerKey{}, g.authenticate(ctx, info.Header)), nil
}

// authenticate returns the user a call acts as: its caller, from the
// certificate its connection's TLS handshake presented or the bearer
// token of its authorization metadata, or the user its Impersonate-*
// metadata names, or system:anonymous for a call without credentials
// where the Anonymous policy lets it reach the authorizer. Refusals are
// gRPC status errors: Unauthenticated for invalid credentials and refused
// anonymous calls, and authn.Impersonate's 400 and 403.
func (g *gate) authenticate(ctx context.Context, md metadata.MD) caller {
	creds := authn.Credentials{}
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			creds.TLS = &ti.State
		}
	}
	if v := md.Get("authorization"); len(v) > 0 {
		creds.Authorization = v[0]
	}
	u, ok, err := g.authn.Authenticate(creds)
	g.metrics.Observe(ok, err)
	switch {
	case err != nil || (!ok && g.anonymous != authn.AnonymousAuthorized):
		return caller{refused: apistatus.ToGRPC(apierrors.NewUnauthorized("Unauthorized"))}
	case !ok:
		u = authn.Anonymous()
	}
	as, impersonated, err := authn.Impersonate(ctx, g.authz, u, impersonationHeaders(md))
	if err != nil {
		return caller{authenticated: u, refused: apistatus.ToGRPC(err)}
	}
	c := caller{user: u, authenticated: u}
	if impersonated {
		c.user, c.impersonated = as, true
	}
	return c
}

// impersonationHeaders returns the Impersonate-* entries of gRPC metadata
// (whose keys are lower case) under the HTTP header keys authn reads.
func impersonationHeaders(md metadata.MD) http.Header {
	var h http.Header
	for k, v := range md {
		if strings.HasPrefix(k, "impersonate-") {
			if h == nil {
				h = http.Header{}
			}
			h[textproto.CanonicalMIMEHeaderKey(k)] = v
		}
	}
	return h
}

// refusal is tap's refusal of the call of ctx, if it refused it.
func refusal(ctx context.Context) error {
	c, _ := ctx.Value(callerKey{}).(caller)
	return c.refused
}

// guard returns a copy of desc whose handlers end a call tap refused,
// with tap's status (audited, and with its audit-id; see auditID): a
// unary handler before it decodes the request message (the unary
// interceptors, which run after decoding, never see the call), a
// streaming one before it receives anything (the
// stream interceptors, which run before it, read nothing; grpcserver's
// metrics count the call with its code). grpc-go writes the status (a
// trailers-only response, and RST_STREAM if the client is still sending),
// drops the part of the message that had arrived, and ends the call's
// context.
func (g *gate) guard(desc *grpc.ServiceDesc) *grpc.ServiceDesc {
	d := *desc
	d.Methods = slices.Clone(desc.Methods)
	for i, m := range d.Methods {
		h, method := m.Handler, "/"+desc.ServiceName+"/"+m.MethodName
		d.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			id := auditID(ctx)
			ctx = context.WithValue(ctx, auditIDCtxKey{}, id)
			if err := refusal(ctx); err != nil {
				// A refusal is a trailers-only response: the
				// Audit-Id goes with its status.
				_ = grpc.SetTrailer(ctx, metadata.Pairs(auditIDKey, id))
				g.auditRefusal(ctx, method, id, err)
				return nil, err
			}
			_ = grpc.SetHeader(ctx, metadata.Pairs(auditIDKey, id))
			return h(srv, ctx, dec, ic)
		}
	}
	d.Streams = slices.Clone(desc.Streams)
	for i, s := range d.Streams {
		h, method := s.Handler, "/"+desc.ServiceName+"/"+s.StreamName
		d.Streams[i].Handler = func(srv any, ss grpc.ServerStream) error {
			if err := refusal(ss.Context()); err != nil {
				// The stream interceptor, which runs first, gave
				// the call its Audit-Id.
				if gs, ok := ss.(*gatedStream); ok {
					g.auditRefusal(ss.Context(), method, gs.auditID, err)
				}
				return err
			}
			return h(srv, ss)
		}
	}
	return &d
}

// admit puts the caller tap established into ctx, authorizes the call
// and takes seats for it. req is the call's request message, whose ref
// describes the call to the authorizer and to flow control; a refused
// call is PermissionDenied with kube-apiserver's 403 Status, and takes no
// seats. When the audit policy audits the call, its event is begun here
// and is in the returned context; a call refused here is audited.
func (g *gate) admit(ctx context.Context, method string, req any) (context.Context, func(), error) {
	if exempt(method) {
		return ctx, func() {}, nil
	}
	var ev *audit.Request
	if g.auditor != nil {
		ev = g.beginAudit(ctx, method, req)
		ctx = audit.WithRequest(ctx, ev)
	}
	ctx, release, err := g.authorize(ctx, method, req)
	if err != nil {
		ev.CompleteStatus(apistatus.FromError(err))
	}
	return ctx, release, err
}

// authorize is admit's work once the call's audit event has begun.
func (g *gate) authorize(ctx context.Context, method string, req any) (context.Context, func(), error) {
	c, ok := ctx.Value(callerKey{}).(caller)
	if !ok || c.refused != nil {
		// tap decides on every call that is not exempt, and guard ends
		// the refused ones before this; this is not reached.
		return nil, nil, apistatus.ToGRPC(apierrors.NewUnauthorized("Unauthorized"))
	}
	ctx = identity.WithUser(ctx, c.user)
	digest := &flowcontrolv1.RequestDigest{Verb: verb(method), IsResourceRequest: true, Path: method}
	var ref *apiv1.ResourceRef
	if r, ok := req.(interface{ GetRef() *apiv1.ResourceRef }); ok {
		ref = r.GetRef()
		digest.ApiGroup, digest.Resource, digest.Subresource = ref.GetGroup(), ref.GetResource(), ref.GetSubresource()
		digest.Namespace, digest.Name = ref.GetNamespace(), ref.GetName()
	}
	fieldSelector := ""
	if r, ok := req.(interface{ GetFieldSelector() string }); ok {
		fieldSelector = r.GetFieldSelector()
	}
	a := authz.ForResource(c.user, digest.Verb, ref.GetGroup(), ref.GetVersion(), ref.GetResource(), ref.GetSubresource(),
		ref.GetNamespace(), ref.GetName(), fieldSelector)
	var ev *audit.Request
	if g.auditor != nil {
		ev = audit.FromContext(ctx)
	}
	var allowed bool
	var reason string
	if ev != nil {
		// An audited call's event names the grant that allowed it.
		allowed, reason = authz.Explain(ctx, g.authz, a)
		audit.AnnotateDecision(ev, allowed, reason)
	} else {
		allowed, reason = g.authz.Allowed(ctx, a)
	}
	if !allowed {
		return nil, nil, apistatus.ToGRPC(authz.Forbidden(a, reason))
	}
	if l, ok := req.(*apiv1.ListRequest); ok {
		digest.EstimatedWidth = g.work.ListSeats(schema.GroupVersionResource{Group: ref.GetGroup(), Version: ref.GetVersion(), Resource: ref.GetResource()},
			listQuery(l), ref.GetName() != "")
	}
	g.work.EstimateWrite(digest)
	grant, err := g.fc.Acquire(ctx, digest)
	if err != nil {
		return nil, nil, apistatus.ToGRPC(err)
	}
	return ctx, grant.Release, nil
}

// listQuery is the REST query of the same list as l, for worksize.
func listQuery(l *apiv1.ListRequest) url.Values {
	q := url.Values{}
	for k, v := range map[string]string{
		"labelSelector": l.GetLabelSelector(), "fieldSelector": l.GetFieldSelector(),
		"resourceVersion": l.GetResourceVersion(), "resourceVersionMatch": l.GetResourceVersionMatch(),
	} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if l.GetLimit() > 0 {
		q.Set("limit", strconv.FormatInt(l.GetLimit(), 10))
	}
	return q
}

// verb is the Kubernetes verb of a ResourceService method.
func verb(method string) string {
	m := method[strings.LastIndex(method, "/")+1:]
	return strings.ToLower(m)
}

func (g *gate) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	ctx, release, err := g.admit(ctx, info.FullMethod, req)
	if err != nil {
		return nil, err
	}
	defer release()
	resp, err := h(ctx, req)
	if g.auditor != nil {
		completeAudit(audit.FromContext(ctx), resp, err)
	}
	return resp, err
}

// stream admits a stream on its first message (the request of a
// server-streaming call). A watch holds its seats only while it sends
// its initial events (watchinit), and counts as a watcher of its
// resource while it is open (worksize); a list holds its seats until it
// has sent its last message, as a REST list does.
func (g *gate) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if exempt(info.FullMethod) {
		return h(srv, ss)
	}
	gs := &gatedStream{ServerStream: ss, gate: g, method: info.FullMethod, auditID: auditID(ss.Context())}
	md := metadata.Pairs(auditIDKey, gs.auditID)
	if refusal(ss.Context()) != nil {
		// guard refuses the call: a trailers-only response.
		ss.SetTrailer(md)
	} else {
		_ = ss.SetHeader(md)
	}
	err := h(srv, gs)
	gs.done()
	if gs.admitted && g.auditor != nil {
		completeAudit(audit.FromContext(gs.ctx), nil, err)
	}
	return err
}

type gatedStream struct {
	grpc.ServerStream
	gate     *gate
	method   string
	ctx      context.Context
	admitted bool
	auditID  string
	// release gives the stream's seats back; unwatch uncounts a watch,
	// nil for other streams. done calls both when the stream ends.
	release, unwatch func()
}

// done ends what the stream held: its seats (a watch's, unless its
// initial events already gave them back) and a watch's count.
func (s *gatedStream) done() {
	if s.release != nil {
		s.release()
	}
	if s.unwatch != nil {
		s.unwatch()
	}
}

func (s *gatedStream) Context() context.Context {
	if s.ctx != nil {
		return s.ctx
	}
	return s.ServerStream.Context()
}

func (s *gatedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if s.admitted {
		return nil
	}
	ctx, release, err := s.gate.admit(context.WithValue(s.ServerStream.Context(), auditIDCtxKey{}, s.auditID), s.method, m)
	if err != nil {
		return err
	}
	s.ctx, s.admitted, s.release = ctx, true, release
	if w, ok := m.(*apiv1.WatchRequest); ok {
		s.ctx = watchinit.With(ctx, release)
		s.unwatch = s.gate.work.Watching(schema.GroupResource{Group: w.GetRef().GetGroup(), Resource: w.GetRef().GetResource()}, w.GetRef().GetNamespace())
	}
	if s.gate.auditor != nil && verb(s.method) == "watch" {
		// A watch's response starts once it is admitted: its
		// ResponseStarted stage.
		audit.FromContext(ctx).ResponseHeader(http.StatusOK, "")
	}
	return nil
}

// SendMsg sends a message of the stream, recording it for the audit
// event (a list's response object at RequestResponse).
func (s *gatedStream) SendMsg(m any) error {
	if s.admitted && s.gate.auditor != nil {
		recordResponse(audit.FromContext(s.ctx), m)
	}
	return s.ServerStream.SendMsg(m)
}
