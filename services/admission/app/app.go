// Package app assembles the admission service: the policy pipeline over
// the CEL admission policies and the admission webhooks followed from
// the store, behind a gRPC
// server built by lib/grpcserver. The admission binary and the all-in-one
// binary both use it.
package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/meridian-cp/meridian/lib/grpcserver"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/inproc"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/storagecrypt"
	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/internal/admissionmetrics"
	"github.com/meridian-cp/meridian/services/admission/internal/celpolicy"
	"github.com/meridian-cp/meridian/services/admission/internal/policy"
	"github.com/meridian-cp/meridian/services/admission/internal/server"
	"github.com/meridian-cp/meridian/services/admission/internal/storecache"
	"github.com/meridian-cp/meridian/services/admission/internal/webhook"
	storeclient "github.com/meridian-cp/meridian/services/store/client"
)

// ServiceName is the gRPC service served, as reported by the health
// service.
const ServiceName = "meridian.admission.v1.AdmissionService"

// DefaultMaxRequestBytes is the largest AdmitRequest accepted when
// Config.MaxRequestBytes is zero: an object and its old version of up to
// the store's 1.5 MiB limit each, plus room.
const DefaultMaxRequestBytes = 8 << 20

// Config configures the admission service.
type Config struct {
	// MaxRequestBytes is the largest AdmitRequest accepted, in bytes;
	// 0 means DefaultMaxRequestBytes (8 MiB).
	MaxRequestBytes int

	// StoreAddress is the comma-separated addresses of the store's
	// members, where the policies, bindings, param objects and
	// namespaces are read and followed; empty serves no policies (every
	// request is admitted; tests of the pipeline alone).
	StoreAddress string
	// StoreTLS is the store client's TLS configuration, with a client
	// certificate of O=meridian:admission; nil dials plaintext (tests).
	StoreTLS *tls.Config
	// StoreDialOptions are added to the store client's connections, after
	// StoreTLS's credentials: the all-in-one's in-memory connections
	// (inproc.Listeners.DialOptions) replace them.
	StoreDialOptions []grpc.DialOption
	// EncryptionProviderConfig is the gateways' EncryptionConfiguration
	// file, to read param objects encrypted at rest; empty reads values
	// as stored.
	EncryptionProviderConfig string

	// TLS is the server's TLS configuration; nil serves plaintext (tests
	// only).
	TLS *tls.Config
	// Registerer receives the metrics; nil means none.
	Registerer prometheus.Registerer
	// TracerProvider traces the service's gRPC calls and its own spans
	// (lib/telemetry); nil: no tracing.
	TracerProvider trace.TracerProvider
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Trust decides which mTLS peers may assert users; nil trusts none.
	Trust identity.TrustFunc
	// Callers are the organizations (O=) of the client certificates that
	// may call the service when TLS is set; others get PermissionDenied
	// (health checks are open to every caller). nil means the gateways
	// (identity.GatewayOrganization).
	Callers []string
}

// Validate reports every problem of c at once.
func (c *Config) Validate() error {
	var errs []error
	if c.MaxRequestBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxRequestBytes must not be negative, got %d", c.MaxRequestBytes))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("admission: invalid config: %w", err)
	}
	return nil
}

// App is the admission service. New builds it, Serve serves it, Close
// stops it.
type App struct {
	stop  context.CancelFunc // stops following the store
	done  chan struct{}      // closed by Close
	store *storeclient.Client
	crypt *storagecrypt.Transformer
	srv   *grpc.Server
	admit *server.Server
	// bindUnary binds a handler into srv's unary interceptor chain, for
	// calls handled in this process (ClientInProcess).
	bindUnary func(*grpc.UnaryServerInfo, grpc.UnaryHandler) grpc.UnaryHandler
	health    *health.Server
	logger    *slog.Logger // nil: slog.Default()

	closeOnce sync.Once
}

// New builds the service. It does not listen; call Serve. ctx is not
// retained.
func New(ctx context.Context, cfg Config) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	maxRecv := cfg.MaxRequestBytes
	if maxRecv == 0 {
		maxRecv = DefaultMaxRequestBytes
	}
	sopts := grpcserver.Options{
		Service:        "admission",
		TLS:            cfg.TLS,
		Registerer:     cfg.Registerer,
		Logger:         cfg.Logger,
		Trust:          cfg.Trust,
		Access:         identity.ServiceCallers(ServiceName, cfg.Callers),
		MaxRecvMsgSize: maxRecv,
		TracerProvider: cfg.TracerProvider,
	}
	srv, hs, err := grpcserver.New(sopts)
	if err != nil {
		return nil, fmt.Errorf("admission: %w", err)
	}
	bindUnary, err := grpcserver.UnaryServerChain(sopts)
	if err != nil {
		return nil, fmt.Errorf("admission: %w", err)
	}
	a := &App{srv: srv, bindUnary: bindUnary, health: hs, logger: cfg.Logger, stop: func() {}, done: make(chan struct{})}
	var (
		set    policy.Set = policy.Empty{}
		synced []<-chan struct{}
	)
	if cfg.StoreAddress != "" {
		if set, synced, err = a.follow(ctx, cfg); err != nil {
			return nil, err
		}
	}
	s, err := server.New(set, cfg.Registerer)
	if err != nil {
		a.closeStore()
		return nil, err
	}
	a.admit = s
	admissionv1.RegisterAdmissionServiceServer(srv, s)
	// Ready once every followed resource has been read: a service that
	// cannot reach its store (a wrong or missing --store-address) serves
	// an empty policy set, so it must not report ready and take traffic
	// as if the cluster's policies applied. Close's health.Shutdown makes
	// a late SetServingStatus a no-op.
	hs.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	go func() {
		for _, ch := range synced {
			select {
			case <-ch:
			case <-a.done:
				return
			}
		}
		hs.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	}()
	return a, nil
}

// follow dials the store and starts following the RBAC objects (CEL's
// authorizer), the CEL policies and the admission webhooks until Close, and returns the channels closed once
// each followed resource has first been read. The service serves at
// once: until the policies are read its set is empty (scope empty), as a
// new policy applies once its scope reaches the gateways; readiness
// waits for the channels.
func (a *App) follow(ctx context.Context, cfg Config) (policy.Set, []<-chan struct{}, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	crypt, err := storagecrypt.Load(ctx, cfg.EncryptionProviderConfig, storagecrypt.Options{Registry: registry.New(registry.Standard()...), Logger: logger})
	if err != nil {
		return nil, nil, fmt.Errorf("admission: encryption at rest: %w", err)
	}
	st, err := storeclient.Dial(storeclient.Endpoints(cfg.StoreAddress), cfg.StoreTLS, storeclient.Options{DialOptions: cfg.StoreDialOptions})
	if err != nil {
		_ = crypt.Close()
		return nil, nil, fmt.Errorf("admission: %w", err)
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.store, a.crypt, a.stop = st, crypt, cancel
	decrypt := func(ctx context.Context, key string, value []byte) ([]byte, error) {
		plain, _, err := crypt.Decrypt(ctx, key, value)
		return plain, err
	}
	metrics, err := admissionmetrics.New(cfg.Registerer)
	if err != nil {
		a.closeStore()
		return nil, nil, fmt.Errorf("admission: %w", err)
	}
	authz, rbacRead, err := followRBAC(bg, st, decrypt, logger)
	if err != nil {
		a.closeStore()
		return nil, nil, fmt.Errorf("admission: %w", err)
	}
	set, policiesRead, err := celpolicy.New(bg, celpolicy.Config{Store: st, Logger: logger, Decrypt: decrypt, Metrics: metrics, Authorizer: authz})
	if err != nil {
		a.closeStore()
		return nil, nil, fmt.Errorf("admission: %w", err)
	}
	hooks, hooksRead, err := a.followWebhooks(bg, st, decrypt, logger, metrics, set.Namespace, authz)
	if err != nil {
		a.closeStore()
		return nil, nil, fmt.Errorf("admission: %w", err)
	}
	return policy.Union{set, hooks}, append(append(hooksRead, rbacRead...), policiesRead), nil
}

// followWebhooks follows the webhook configurations from the store into
// a webhook set, whose namespaceSelectors read namespace (the policy
// set's, which follows the namespaces), and returns the channels closed
// once each configuration kind has first been read.
func (a *App) followWebhooks(ctx context.Context, st storecache.Store, decrypt storecache.Decrypt, logger *slog.Logger, metrics *admissionmetrics.Metrics, namespace func(string) *corev1.Namespace, authz authorizer.Authorizer) (*webhook.Set, []<-chan struct{}, error) {
	reg := registry.New(registry.Standard()...)
	gv := admissionregistrationv1.SchemeGroupVersion
	vwc, _ := reg.Lookup(gv.WithResource("validatingwebhookconfigurations"))
	mwc, _ := reg.Lookup(gv.WithResource("mutatingwebhookconfigurations"))
	var cache *storecache.Cache
	var hooks *webhook.Set
	load := func(res *registry.Resource) {
		if res != vwc && res != mwc {
			return
		}
		var vs []*admissionregistrationv1.ValidatingWebhookConfiguration
		for _, o := range cache.List(vwc, "", nil) {
			vs = append(vs, o.(*admissionregistrationv1.ValidatingWebhookConfiguration))
		}
		var ms []*admissionregistrationv1.MutatingWebhookConfiguration
		for _, o := range cache.List(mwc, "", nil) {
			ms = append(ms, o.(*admissionregistrationv1.MutatingWebhookConfiguration))
		}
		hooks.Load(vs, ms)
	}
	hooks = webhook.New(webhook.Config{Logger: logger, Metrics: metrics, Namespaces: namespace, Authorizer: authz})
	var err error
	// The cache calls load only from its followers, which Follow starts
	// after cache is set.
	if cache, err = storecache.New(ctx, st, decrypt, logger, load); err != nil {
		return nil, nil, err
	}
	return hooks, []<-chan struct{}{cache.Follow(vwc), cache.Follow(mwc)}, nil
}

// closeStore stops following the store and closes its client.
func (a *App) closeStore() {
	a.stop()
	if a.store != nil {
		_ = a.store.Close()
		_ = a.crypt.Close()
	}
}

// Serve serves gRPC on lis until Close; it returns nil after Close.
func (a *App) Serve(lis net.Listener) error {
	return grpcserver.Serve(a.srv, lis, "admission", a.logger)
}

// Health returns the gRPC health server and the name whose status is
// the service's readiness: NOT_SERVING once Close started
// (daemon.Server; /readyz on --metrics-listen).
func (a *App) Health() (*health.Server, []string) { return a.health, []string{ServiceName} }

// Close stops the service gracefully: health reports NOT_SERVING, scope
// streams end (UNAVAILABLE) and in-flight Admit calls finish. It is safe to
// call more than once.
func (a *App) Close() error {
	a.closeOnce.Do(func() {
		close(a.done)
		a.health.Shutdown()
		a.admit.Close()
		a.srv.GracefulStop()
		a.closeStore()
	})
	return nil
}

// ClientInProcess returns a client of the service for a caller of this
// process holding cert (the all-in-one's gateway): its Admit runs the
// service's handler through the gRPC server's unary interceptors on the
// caller's goroutine, authorized as a call over a connection dialed as
// cert would be, with no encoding and no transport
// (inproc.UnaryMethod); WatchScope goes over conn. Answers and errors are
// those of the gRPC method, except that Config.MaxRequestBytes, a limit
// on received messages, does not apply (the caller bounds what it sends:
// the gateway its request bodies). The handler does not change the
// request (a mutated object goes to a copy), and the caller must not
// change the response.
func (a *App) ClientInProcess(cert *x509.Certificate, conn grpc.ClientConnInterface) admissionv1.AdmissionServiceClient {
	return localClient{
		AdmissionServiceClient: admissionv1.NewAdmissionServiceClient(conn),
		admit:                  inproc.NewUnaryMethod(cert, &grpc.UnaryServerInfo{Server: a.admit, FullMethod: admissionv1.AdmissionService_Admit_FullMethodName}, a.bindUnary, a.admit.Admit),
	}
}

// localClient is ClientInProcess's client.
type localClient struct {
	admissionv1.AdmissionServiceClient
	admit *inproc.UnaryMethod[admissionv1.AdmitRequest, admissionv1.AdmitResponse]
}

// Admit runs the service's Admit in process; call options do not apply.
func (c localClient) Admit(ctx context.Context, in *admissionv1.AdmitRequest, _ ...grpc.CallOption) (*admissionv1.AdmitResponse, error) {
	return c.admit.Call(ctx, in)
}
