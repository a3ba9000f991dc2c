// Package resources implements meridian.api.v1.ResourceService: get, list,
// watch, create, update, patch and delete of the registry's resources,
// stored through the storage package. Both the REST front end (through
// grpc-gateway) and gRPC clients reach the API through it, so they share one
// set of semantics.
//
// Errors are built as Kubernetes StatusErrors and leave the service through
// apistatus.ToGRPC, so every caller gets the Kubernetes reason and details.
package resources

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/crdconvert"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	"github.com/meridian-cp/meridian/services/apigateway/internal/watchfanoutclient"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// HTTPCodeHeader is the gRPC response header through which a method tells
// the REST front end which HTTP status to write (201 for a create).
const HTTPCodeHeader = "x-meridian-http-code"

// Config configures a Server.
type Config struct {
	// Registry is the set of served resources. Required.
	Registry *registry.Registry
	// Codec encodes and decodes objects. Required.
	Codec *codec.Codec
	// Store is the store. Required.
	Store Store
	// Watchfanout serves watches, Any/NotOlderThan reads, consistent
	// lists, and consistent gets when its Gets run in this process
	// (cachedGet), from watchfanout's replicas; nil serves everything
	// from the store.
	Watchfanout *watchfanoutclient.Pool
	// Registerer receives the read metrics; nil: none.
	Registerer prometheus.Registerer
	// Admission admits writes; nil admits everything.
	Admission admissionv1.AdmissionServiceClient
	// WriteGuard checks creates and updates before they are validated
	// (RBAC's escalation prevention); nil checks nothing.
	WriteGuard WriteGuard
	// Quota charges creates against ResourceQuotas; nil charges nothing.
	Quota Quota
	// Converter converts custom resources between their CRD's versions
	// (conversion.go); nil converts strategy None only, and a webhook
	// CRD's objects fail to convert with a 500.
	Converter *crdconvert.Converter
	// Logger logs; nil means slog.Default().
	Logger *slog.Logger
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
	// WatchTimeout bounds watches whose client asked for no timeout;
	// 0 means 30 minutes.
	WatchTimeout time.Duration
	// ResourceVersionWait bounds how long a read that asks for a
	// resourceVersion the store has not reached waits for it, before a 504
	// "Too large resource version"; 0 means 3 seconds.
	ResourceVersionWait time.Duration
	// ListBytesInFlight bounds the bytes of list responses in flight, over
	// every list and caller, flow-control-exempt ones included (see
	// listBudget); 0 means DefaultListBytesInFlight, < 0 no bound.
	ListBytesInFlight int64
	// ListBudgetWait bounds how long a list waits for ListBytesInFlight
	// before a 429 with Retry-After; 0 means one minute.
	ListBudgetWait time.Duration
	// MemoryPacer, when set, paces the process's garbage collector to the
	// list budget while lists are in flight (memtrim.Pacer); nil, or no
	// budget: not paced.
	MemoryPacer MemoryPacer
	// UpdateHintBytes bounds the memory of the objects this server last
	// wrote, kept for the updates that follow (objhints.go); 0 means
	// DefaultUpdateHintBytes, < 0 keeps none.
	UpdateHintBytes int
}

// MemoryPacer paces the process's garbage collector to bursts of bounded
// memory (memtrim.Pacer implements it). Begin and End are called in pairs,
// from any goroutine.
type MemoryPacer interface {
	// Begin reports that a burst begins; bound is the most all bursts
	// in progress hold together.
	Begin(bound int64)
	// End reports that a burst ended.
	End()
}

// WriteGuard checks a write before anything else looks at it: kube-apiserver
// refuses roles and bindings that escalate their author's permissions
// this way (authz.RBAC implements it).
type WriteGuard interface {
	// GuardWrite checks a create (old nil) or an update of obj, an object
	// of res written through a request on namespace/name (name empty for
	// a create), by the user in ctx. Its errors are Kubernetes errors and
	// end the write.
	GuardWrite(ctx context.Context, res *registry.Resource, namespace, name string, obj, old runtime.Object) error
}

// Quota charges creates against the namespace's ResourceQuotas
// (quota.Quotas implements it).
type Quota interface {
	// Charge counts a new object of gr named name in ns against every
	// quota of ns that limits gr, after admission and before the object
	// is stored; its errors are Kubernetes errors (403 exceeded quota)
	// and end the create. A dry run checks and writes nothing.
	Charge(ctx context.Context, ns string, gr schema.GroupResource, name string, dryRun bool) error
	// Replenish reports that an object of gr in ns was deleted.
	Replenish(ns string, gr schema.GroupResource)
}

// Server implements apiv1.ResourceServiceServer.
type Server struct {
	apiv1.UnimplementedResourceServiceServer
	cfg Config

	// nsHints guess the guard of creates (nsguard.go).
	nsHints namespaceHints
	// objHints guess the object an update starts from (objhints.go).
	objHints objectHints

	m *metrics
	// listBudget bounds the list bytes in flight; nil: no bound.
	listBudget *listBudget
	// cacheResources holds cacheResource's *watchv1.Resource of each
	// resource version served through watchfanout
	// (schema.GroupVersionResource keys): as many as were ever served.
	cacheResources sync.Map
}

var (
	_ apiv1.ResourceServiceServer = (*Server)(nil)
	_ Store                       = (*storage.Store)(nil)
)

// New returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.WatchTimeout == 0 {
		cfg.WatchTimeout = 30 * time.Minute
	}
	if cfg.ResourceVersionWait == 0 {
		cfg.ResourceVersionWait = 3 * time.Second
	}
	if cfg.ListBytesInFlight == 0 {
		cfg.ListBytesInFlight = DefaultListBytesInFlight
	}
	if cfg.ListBudgetWait == 0 {
		cfg.ListBudgetWait = defaultListBudgetWait
	}
	if cfg.UpdateHintBytes == 0 {
		cfg.UpdateHintBytes = DefaultUpdateHintBytes
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("resources: metrics: %w", err)
	}
	s := &Server{cfg: cfg, m: m, listBudget: newListBudget(cfg.ListBytesInFlight, cfg.ListBudgetWait)}
	s.objHints.limit = max(cfg.UpdateHintBytes, 0)
	return s, nil
}

// resolve finds the resource a ref names and checks the ref's shape. A
// deprecated custom resource version's warning goes to the client.
func (s *Server) resolve(ctx context.Context, ref *apiv1.ResourceRef, wantName bool) (*registry.Resource, error) {
	gvr := schema.GroupVersionResource{Group: ref.GetGroup(), Version: ref.GetVersion(), Resource: ref.GetResource()}
	res, ok := s.cfg.Registry.Lookup(gvr)
	if !ok || (ref.GetSubresource() != "" && (!res.HasSubresource(ref.GetSubresource()) || ref.GetName() == "")) {
		return nil, apierrors.NewNotFound(gvr.GroupResource(), ref.GetName())
	}
	if !res.Namespaced && ref.GetNamespace() != "" {
		return nil, apierrors.NewNotFound(gvr.GroupResource(), ref.GetName())
	}
	if wantName && ref.GetName() == "" {
		return nil, apierrors.NewBadRequest("a name is required")
	}
	if wantName && res.Namespaced && ref.GetNamespace() == "" {
		return nil, apierrors.NewBadRequest("a namespace is required")
	}
	if res.Custom != nil && res.Custom.Warning != "" {
		warn(ctx, res.Custom.Warning)
	}
	return res, nil
}

// mediaType negotiates the response of a write to ref.
func (s *Server) mediaType(ref *apiv1.ResourceRef, accept string) (string, error) {
	opts := negotiation.Writes
	gvr := schema.GroupVersionResource{Group: ref.GetGroup(), Version: ref.GetVersion(), Resource: ref.GetResource()}
	if res, ok := s.cfg.Registry.Lookup(gvr); ok {
		opts = served(res, opts)
	}
	out, err := negotiateOutput(accept, "", opts)
	return out.mediaType, err
}

// served returns the media types of opts that res's objects are served
// in: custom resources have no protobuf form (kube-apiserver answers 406
// to a client that accepts only protobuf, and JSON to one that also
// accepts JSON).
func served(res *registry.Resource, opts negotiation.Options) negotiation.Options {
	if res.Custom == nil {
		return opts
	}
	opts.Types = slices.DeleteFunc(slices.Clone(opts.Types), func(t string) bool { return t == negotiation.Protobuf })
	return opts
}

// write runs a write and encodes its result. The response media type is
// negotiated first, so that a request whose Accept cannot be served fails
// (406) before it changes anything. code, when not 0, is the HTTP status of
// success (201 for a create).
func (s *Server) write(ctx context.Context, ref *apiv1.ResourceRef, accept string, code int, do func() (runtime.Object, error)) (*httpbody.HttpBody, error) {
	mt, err := s.mediaType(ref, accept)
	if err != nil {
		return nil, toGRPC(err)
	}
	obj, err := do()
	if err != nil {
		return nil, toGRPC(err)
	}
	if code != 0 {
		setHTTPCode(ctx, code)
	}
	return toGRPCBody(s.respond(obj, mt))
}

// respond encodes obj in mediaType.
func (s *Server) respond(obj runtime.Object, mediaType string) (*httpbody.HttpBody, error) {
	data, err := s.cfg.Codec.EncodeToBytes(obj, mediaType)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return &httpbody.HttpBody{ContentType: mediaType, Data: data}, nil
}

// respondAs encodes a read's result as negotiated: a Table or the object.
func (s *Server) respondAs(res *registry.Resource, obj runtime.Object, out output) (*httpbody.HttpBody, error) {
	data, err := s.render(res, obj, out)
	if err != nil {
		return nil, err
	}
	return &httpbody.HttpBody{ContentType: out.mediaType, Data: data}, nil
}

// setHTTPCode tells the REST front end which status to write.
func setHTTPCode(ctx context.Context, code int) {
	_ = grpc.SetHeader(ctx, metadata.Pairs(HTTPCodeHeader, strconv.Itoa(code)))
}

// user returns the caller, as the gateway authenticated it.
func user(ctx context.Context) identity.User {
	u, _ := identity.UserFrom(ctx)
	return u
}
