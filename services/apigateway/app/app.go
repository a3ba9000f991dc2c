// Package app assembles the API gateway: the REST front end, the
// ResourceService behind it, and the connections to the store, admission
// and flow-control services. The gateway's own binary and the all-in-one
// binary both start it through New, Serve and Close.
package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"github.com/meridian-cp/meridian/lib/kube/crdconvert"
	"github.com/meridian-cp/meridian/lib/kube/webhook"
	"github.com/meridian-cp/meridian/lib/memtrim"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/meridian-cp/meridian/lib/flowcontrol/apf"
	"github.com/meridian-cp/meridian/lib/grpcclient"
	"github.com/meridian-cp/meridian/lib/grpcserver"
	"github.com/meridian-cp/meridian/lib/healthz"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/storagecrypt"
	"github.com/meridian-cp/meridian/lib/telemetry"
	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/admissionclient"
	"github.com/meridian-cp/meridian/services/apigateway/internal/audit"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authn"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authn/oidc"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authn/serviceaccount"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authz"
	"github.com/meridian-cp/meridian/services/apigateway/internal/coalesce"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/apfconfig"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/clusterroleaggregation"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/gc"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/namespace"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/vapstatus"
	"github.com/meridian-cp/meridian/services/apigateway/internal/fieldmanager"
	"github.com/meridian-cp/meridian/services/apigateway/internal/flowcontrolclient"
	"github.com/meridian-cp/meridian/services/apigateway/internal/frontend"
	"github.com/meridian-cp/meridian/services/apigateway/internal/grpcapi"
	"github.com/meridian-cp/meridian/services/apigateway/internal/h2conn"
	"github.com/meridian-cp/meridian/services/apigateway/internal/quota"
	"github.com/meridian-cp/meridian/services/apigateway/internal/resources"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	"github.com/meridian-cp/meridian/services/apigateway/internal/watchfanoutclient"
	"github.com/meridian-cp/meridian/services/apigateway/internal/worksize"
	storeclient "github.com/meridian-cp/meridian/services/store/client"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	corev1 "k8s.io/api/core/v1"
)

// Config configures the gateway.
type Config struct {
	// StoreAddress is the store's gRPC address, or several members'
	// addresses separated by commas: the store client follows the leader
	// and retries what is safe to retry. Required.
	StoreAddress string
	// StoreLocalAddress is the comma-separated addresses of the store
	// members in this gateway's region or zone: serializable reads
	// (resourceVersion=0, NotOlderThan, continued lists) and store watches
	// go to them first (storeclient.Options.Local); writes and consistent
	// reads go to the leader. Empty: no preference.
	StoreLocalAddress string
	// AdmissionAddress is the admission service's address; empty: no
	// admission.
	AdmissionAddress string
	// AdmissionInProcess, when set, makes the admission client given its
	// connection to AdmissionAddress: the all-in-one's admission service,
	// whose App.ClientInProcess runs Admit in this process instead of
	// over the connection.
	AdmissionInProcess func(grpc.ClientConnInterface) admissionv1.AdmissionServiceClient
	// FlowControlAddress is the flow-control service's address, or its
	// replicas' comma-separated, each as the replica's
	// --advertise-address says (the leader takes the calls, the others
	// name it); empty: no flow control.
	FlowControlAddress string
	// FlowControlInProcess, when set, makes the client of the first of
	// FlowControlAddress's replicas, given its connection: the
	// all-in-one's flow-control service, whose App.ClientInProcess
	// decides Acquire and ReleaseGrants in this process, unary, instead of
	// on a Decide stream over the connection.
	FlowControlInProcess func(grpc.ClientConnInterface) flowcontrolv1.FlowControlServiceClient
	// FlowControlFallbackLimit is the server concurrency limit (seats) of
	// the gateway's own limiter, used with the fleet's FlowSchemas and
	// PriorityLevelConfigurations while the flow-control service does not
	// answer: this gateway's share of the service's limit; 0 means 600.
	FlowControlFallbackLimit int
	// ListBytesInFlight bounds the bytes of list responses in flight in
	// this gateway, over every list and caller (resources.Config); 0
	// means resources.DefaultListBytesInFlight, < 0 no bound.
	ListBytesInFlight int64
	// MemoryPacer, when set, paces the process's garbage collector to the
	// list budget while lists are in flight (memtrim.Pacer: the process's
	// one, which its main creates); nil: not paced.
	MemoryPacer *memtrim.Pacer
	// UpdateHintBytes bounds the memory of the objects this gateway last
	// wrote, kept so that the updates that follow need not read them
	// (resources.Config); 0 means resources.DefaultUpdateHintBytes.
	UpdateHintBytes int
	// WatchFanoutAddresses are watchfanout's replicas, which serve
	// watches and Any/NotOlderThan reads; empty: everything is served from
	// the store.
	WatchFanoutAddresses []string
	// WatchFanoutStreamList, when set, serves the StreamList calls (the
	// JSON and protobuf lists) meant for the first of
	// WatchFanoutAddresses in this process: the all-in-one's watchfanout,
	// whose App.StreamListInProcess hands each chunk over without a
	// connection. Its other calls go over the connection.
	WatchFanoutStreamList watchfanoutclient.StreamListFunc
	// WatchFanoutGet, when set, serves the Get calls meant for the first
	// of WatchFanoutAddresses in this process (the all-in-one's
	// watchfanout, App.GetInProcess). With it, and no other replica,
	// consistent GETs are served from watchfanout's cache too.
	WatchFanoutGet watchfanoutclient.GetFunc
	// ClientTLS is the mTLS configuration for calls to the other services
	// (the gateway's client certificate, O=meridian:gateways, and the
	// internal CA); nil is plaintext, for tests only.
	ClientTLS *tls.Config
	// DialOptions are added to every connection to the other services,
	// after ClientTLS's credentials: the all-in-one's in-memory
	// connections (inproc.Listeners.DialOptions) replace them.
	DialOptions []grpc.DialOption
	// ServingTLS is the HTTPS (and gRPC API) configuration. Required.
	// Client certificates are requested and verified against ClientCAs.
	ServingTLS *tls.Config
	// ClientCAs verifies the client certificates of API users: the API
	// client CA alone, never the internal CA, whose certificates would
	// otherwise log in as users. nil disables certificate authentication.
	ClientCAs *x509.CertPool
	// TokenAuthFile is a kube-apiserver static token file; empty: none.
	TokenAuthFile string
	// ServiceAccounts configures service account tokens; the zero value
	// turns them off.
	ServiceAccounts ServiceAccountConfig
	// OIDC authenticates users by the ID tokens of an OpenID issuer
	// (kube-apiserver's --oidc-* flags); zero: none.
	OIDC OIDCOptions
	// RootCAFile is the PEM CA bundle that verifies the API's serving
	// certificate, published in every namespace as the kube-root-ca.crt
	// ConfigMap (read again when it changes); empty: none published.
	RootCAFile string
	// DisableAnonymousAuth refuses (401) every request without
	// credentials (kube-apiserver's --anonymous-auth=false). Otherwise
	// such requests are system:anonymous (see anonymousPolicy).
	DisableAnonymousAuth bool
	// Registerer receives metrics; Gatherer serves them on /metrics. Either
	// may be nil.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
	// RequestLogLevel is the level of the one log line per API request;
	// nil means debug.
	RequestLogLevel slog.Leveler
	// TracerProvider traces API requests (continuing a W3C traceparent a
	// client sends), the gRPC API and the gateway's own spans
	// (lib/telemetry); nil: no tracing.
	TracerProvider trace.TracerProvider
	// Logger logs; nil means slog.Default().
	Logger *slog.Logger
	// GatewayID names this replica to flow control; empty: a random id.
	GatewayID string
	// Registry is the set of served resources; nil means every standard
	// kind (registry.Standard). watchfanout must serve the same set.
	Registry *registry.Registry
	// AuthorizationMode is AuthorizationRBAC (the default when empty) or
	// AuthorizationAlwaysAllow.
	AuthorizationMode string
	// EncryptionProviderConfig is the path of an apiserver.config.k8s.io/v1
	// EncryptionConfiguration (kube-apiserver's
	// --encryption-provider-config): the resources it names are encrypted
	// before they are written to the store and decrypted when read. Empty:
	// values are stored as they are. watchfanout must read the same file.
	EncryptionProviderConfig string
	// Audit are kube-apiserver's audit settings (--audit-policy-file,
	// --audit-log-*, --audit-webhook-*); without a policy file nothing is
	// audited.
	Audit AuditOptions
	// ShutdownDelay is how long the gateway keeps serving once shutdown
	// has begun, with /readyz failing ("shutdown"), so that load balancers
	// stop sending it requests before its listeners close
	// (kube-apiserver's --shutdown-delay-duration); 0: they close at once.
	ShutdownDelay time.Duration
}

// AuditOptions configure auditing; AddFlags defines kube-apiserver's
// audit flags for them.
type AuditOptions = audit.Options

// Validate reports every problem with the configuration.
func (c *Config) Validate() error {
	var errs []error
	if c.StoreAddress == "" {
		errs = append(errs, errors.New("apigateway: StoreAddress is required"))
	}
	if c.ServingTLS == nil {
		errs = append(errs, errors.New("apigateway: ServingTLS is required"))
	} else if len(c.ServingTLS.Certificates) == 0 && c.ServingTLS.GetCertificate == nil {
		errs = append(errs, errors.New("apigateway: ServingTLS has no certificate"))
	}
	if c.ClientCAs == nil && c.TokenAuthFile == "" && !c.OIDC.Enabled() {
		errs = append(errs, errors.New("apigateway: no authentication configured: set ClientCAs, TokenAuthFile and/or OIDC"))
	}
	if err := c.OIDC.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("apigateway: %w", err))
	}
	if err := c.ServiceAccounts.validate(); err != nil {
		errs = append(errs, err)
	}
	if c.AuthorizationMode != "" && c.AuthorizationMode != AuthorizationRBAC && c.AuthorizationMode != AuthorizationAlwaysAllow {
		errs = append(errs, fmt.Errorf("apigateway: AuthorizationMode %q is neither %s nor %s", c.AuthorizationMode, AuthorizationRBAC, AuthorizationAlwaysAllow))
	}
	if err := c.Audit.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("apigateway: %w", err))
	}
	if c.ShutdownDelay < 0 {
		errs = append(errs, fmt.Errorf("apigateway: ShutdownDelay %v is negative", c.ShutdownDelay))
	}
	return errors.Join(errs...)
}

// App is a running gateway.
type App struct {
	cfg     Config
	log     *slog.Logger
	conns   []*grpc.ClientConn
	closers []func() error
	grpc    *grpcapi.Server
	http    *http.Server
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	// serving is set once Serve or ServeGRPC was called: only then does
	// shutdown wait for ShutdownDelay.
	serving atomic.Bool
	// stopping is set when shutdown begins; the "shutdown" readiness
	// check fails from then on.
	stopping atomic.Bool
	once     sync.Once
	closeErr error
	// fallback is the flow-control limiter used while the service does
	// not answer; nil without flow control.
	fallback *apf.Controller
}

// New connects to the services, makes sure the namespaces every cluster
// has exist, and builds the HTTP server. It does not listen.
func New(ctx context.Context, cfg Config) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	a := &App{cfg: cfg, log: cfg.Logger}
	bg, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	ok := false
	defer func() {
		if !ok {
			_ = a.Close()
		}
	}()

	reg, err := prepareRegistry(cfg)
	if err != nil {
		return nil, err
	}
	crypt, err := a.loadEncryption(ctx, reg)
	if err != nil {
		return nil, err
	}
	storeConn, err := a.dialStore()
	if err != nil {
		return nil, err
	}
	store := storage.New(storeConn, storage.WithTransformer(crypt))
	c, err := codec.New()
	if err != nil {
		return nil, err
	}
	auditor, err := audit.New(cfg.Audit, protobufToJSON(c), cfg.Logger, cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("apigateway: %w", err)
	}
	// The auditor closes (flushing the webhook's buffer) after the
	// servers have stopped: no request is left to audit.
	a.closers = append(a.closers, auditor.Close)
	svc, err := a.connectServices(bg)
	if err != nil {
		return nil, err
	}
	saTokens, err := a.newServiceAccountTokens(ctx, bg, store, c, reg)
	if err != nil {
		return nil, err
	}
	oidcTokens, err := a.newOIDC(bg)
	if err != nil {
		return nil, err
	}
	authenticator, err := newAuthenticator(cfg, saTokens, oidcTokens)
	if err != nil {
		return nil, err
	}
	authorizer, rbac, err := a.newAuthorizer(store, c)
	if err != nil {
		return nil, err
	}
	rsCfg := resources.Config{
		Registry: reg, Codec: c, Store: store, Logger: cfg.Logger, Registerer: cfg.Registerer,
		Admission: svc.admission, Watchfanout: svc.watchfanout,
		ListBytesInFlight: cfg.ListBytesInFlight, UpdateHintBytes: cfg.UpdateHintBytes,
		// CRD conversion webhooks, each call bounded by kube-apiserver's
		// 30 s webhook timeout.
		Converter: crdconvert.New(webhook.New(webhook.Options{}), 0),
	}
	if cfg.MemoryPacer != nil {
		rsCfg.MemoryPacer = cfg.MemoryPacer
	}
	if rbac != nil {
		rsCfg.WriteGuard = rbac
	}
	var quotas *quota.Quotas
	if _, ok := reg.Lookup(corev1.SchemeGroupVersion.WithResource("resourcequotas")); ok {
		if quotas, err = quota.New(quota.Config{Registry: reg, Codec: c, Store: store, Logger: cfg.Logger}); err != nil {
			return nil, fmt.Errorf("apigateway: %w", err)
		}
		rsCfg.Quota = quotas
	}
	resourceServer, err := resources.New(rsCfg)
	if err != nil {
		return nil, fmt.Errorf("apigateway: %w", err)
	}
	if quotas != nil {
		a.background(bg, func(ctx context.Context) { quotas.Run(ctx, resourceServer) })
	}
	health, err := a.newHealthChecks(bg, storeConn, crypt, svc.dependencies)
	if err != nil {
		return nil, err
	}
	var work *worksize.Tracker
	if svc.flowControl != nil {
		work = worksize.NewTracker(reg, store, 0, a.cfg.Logger)
		a.background(bg, work.Run)
	}
	handler, err := a.newHandler(bg, reg, authenticator, authorizer, auditor, resourceServer, svc.flowControl, work, health, saTokens)
	if err != nil {
		return nil, err
	}
	if err := ensureNamespaces(ctx, store, c, reg); err != nil {
		return nil, err
	}
	if err := a.startCRDTable(ctx, bg, reg, c, store); err != nil {
		return nil, err
	}
	if err := a.startAuthorization(ctx, bg, reg, resourceServer, rbac); err != nil {
		return nil, err
	}
	if err := a.startControllers(bg, reg, c, store, resourceServer); err != nil {
		return nil, err
	}

	tlsConf := servingTLS(cfg)
	a.grpc, err = grpcapi.New(grpcapi.Config{
		Server:        grpcserver.Options{Service: "apigateway", TLS: tlsConf, Registerer: cfg.Registerer, Logger: cfg.Logger, TracerProvider: cfg.TracerProvider},
		Authenticator: authenticator,
		Anonymous:     a.anonymousPolicy(),
		Authorizer:    authorizer,
		Auditor:       auditor,
		FlowControl:   svc.flowControl,
		WorkSize:      work,
		Resources:     resourceServer,
	})
	if err != nil {
		return nil, err
	}
	a.http = newHTTPServer(telemetry.HTTPHandler(handler, cfg.TracerProvider, "apiserver"), tlsConf, cfg.Logger)
	ok = true
	return a, nil
}

// setDefaults fills in the optional fields left empty.
func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.GatewayID == "" {
		c.GatewayID = "apigateway-" + uuid.NewString()[:8]
	}
}

// newAuthenticator authenticates API users by client certificate
// (ClientCAs), by static token (TokenAuthFile), by service account token
// (sa, nil when off) and by OIDC ID token (oidcTokens, nil when off).
func newAuthenticator(cfg Config, sa *serviceaccount.Tokens, oidcTokens *oidc.Authenticator) (*authn.Authenticator, error) {
	var tokens *authn.TokenFile
	if cfg.TokenAuthFile != "" {
		var err error
		if tokens, err = authn.LoadTokenFile(cfg.TokenAuthFile); err != nil {
			return nil, err
		}
	}
	var opts []authn.Option
	if sa != nil {
		opts = append(opts, authn.WithTokenAuthenticator(sa), authn.WithAPIAudiences(sa.APIAudiences()))
	}
	if oidcTokens != nil {
		opts = append(opts, authn.WithAPITokenAuthenticator(oidcTokens))
	}
	return authn.New(cfg.ClientCAs, tokens, opts...), nil
}

// loadEncryption builds the transformer of EncryptionProviderConfig;
// Close closes it (its KMS connections).
func (a *App) loadEncryption(ctx context.Context, reg *registry.Registry) (*storagecrypt.Transformer, error) {
	t, err := storagecrypt.Load(ctx, a.cfg.EncryptionProviderConfig, storagecrypt.Options{Registry: reg, Logger: a.cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("apigateway: encryption at rest: %w", err)
	}
	a.closers = append(a.closers, t.Close)
	if n := len(t.Resources()); n > 0 {
		a.log.Info("encryption at rest configured", "config", a.cfg.EncryptionProviderConfig, "resources", n)
	}
	return t, nil
}

// dialStore connects to the store's members; Close closes the connection.
func (a *App) dialStore() (*storeclient.Client, error) {
	conn, err := storeclient.Dial(storeclient.Endpoints(a.cfg.StoreAddress), a.cfg.ClientTLS, storeclient.Options{Local: storeclient.Endpoints(a.cfg.StoreLocalAddress), DialOptions: a.cfg.DialOptions})
	if err != nil {
		return nil, fmt.Errorf("apigateway: store: %w", err)
	}
	a.closers = append(a.closers, conn.Close)
	return conn, nil
}

// prepareRegistry returns the served resources and builds every kind's
// field manager (server-side apply schemas) now, so that no request pays
// for it.
func prepareRegistry(cfg Config) (*registry.Registry, error) {
	reg := cfg.Registry
	if reg == nil {
		reg = registry.New(registry.Standard()...)
	}
	deduced, err := fieldmanager.Prepare(reg)
	if err != nil {
		return nil, fmt.Errorf("apigateway: field managers: %w", err)
	}
	if len(deduced) > 0 {
		cfg.Logger.Warn("server-side apply merges every list of these kinds atomically: their schema did not convert", "kinds", fmt.Sprint(deduced))
	}
	return reg, nil
}

// services are the gateway's clients of the optional services, each nil
// when its address is empty, and the health checks of those configured.
type services struct {
	admission   admissionv1.AdmissionServiceClient
	flowControl *flowcontrolclient.Client
	watchfanout *watchfanoutclient.Pool
	// dependencies are optional checks (Check.Degraded set): the gateway
	// serves without each of these services, as their Degraded says.
	dependencies []healthz.Check
}

// connectServices connects to admission, flow control and watchfanout's
// replicas, as configured, and starts the clients' background work, which
// runs until bg ends.
func (a *App) connectServices(bg context.Context) (services, error) {
	var svc services
	if addr := a.cfg.AdmissionAddress; addr != "" {
		conn, err := a.dial(addr)
		if err != nil {
			return svc, err
		}
		ac, err := admissionclient.New(conn, a.cfg.Logger, a.cfg.Registerer)
		if err != nil {
			return svc, fmt.Errorf("apigateway: admission: %w", err)
		}
		if a.cfg.AdmissionInProcess != nil {
			ac.AdmissionServiceClient = a.cfg.AdmissionInProcess(conn)
		}
		svc.admission = ac
		// Admission fails closed, and the writes it must admit fail
		// while it is unreachable; the gateway serves everything else, and
		// every replica shares the service, so taking replicas out of
		// rotation would not help: as kube-apiserver's readiness does not
		// follow its admission webhooks, the check is optional.
		svc.dependencies = append(svc.dependencies, grpcHealthCheck("admission", "", []*grpc.ClientConn{conn}, "writes that need admission fail"))
		a.background(bg, ac.Run)
	}
	if addrs := storeclient.Endpoints(a.cfg.FlowControlAddress); len(addrs) > 0 {
		var replicas []flowcontrolclient.Replica
		var conns []*grpc.ClientConn
		for i, addr := range addrs {
			conn, err := a.dial(addr)
			if err != nil {
				return svc, err
			}
			conns = append(conns, conn)
			if i == 0 && a.cfg.FlowControlInProcess != nil {
				// No Conn: its calls are unary, and run in process.
				replicas = append(replicas, flowcontrolclient.Replica{Address: addr, Client: a.cfg.FlowControlInProcess(conn)})
				continue
			}
			replicas = append(replicas, flowcontrolclient.Replica{Address: addr, Client: flowcontrolv1.NewFlowControlServiceClient(conn), Conn: conn})
		}
		svc.flowControl = flowcontrolclient.NewReplicas(replicas, a.cfg.GatewayID, a.cfg.Logger)
		// Without the service, requests take seats from a limiter of
		// this gateway's own (flowcontrolclient.Acquire), which follows
		// the stored configuration (startControllers); its metrics stay
		// private, the service's names are the service's.
		local, err := apf.New(apf.Config{ServerConcurrencyLimit: a.cfg.FlowControlFallbackLimit, Logger: a.cfg.Logger})
		if err != nil {
			return svc, fmt.Errorf("apigateway: flow-control fallback: %w", err)
		}
		a.fallback = local
		a.closers = append(a.closers, local.Close)
		svc.flowControl.SetFallback(local)
		svc.dependencies = append(svc.dependencies, grpcHealthCheck("flowcontrol", "", conns, "requests are limited by this gateway alone"))
		a.background(bg, svc.flowControl.Run)
	}
	if len(a.cfg.WatchFanoutAddresses) > 0 {
		var conns []*grpc.ClientConn
		for _, addr := range a.cfg.WatchFanoutAddresses {
			conn, err := a.dial(addr)
			if err != nil {
				return svc, err
			}
			conns = append(conns, conn)
		}
		var opts []watchfanoutclient.Option
		if a.cfg.WatchFanoutStreamList != nil {
			opts = append(opts, watchfanoutclient.WithStreamListInProcess(0, a.cfg.WatchFanoutStreamList))
		}
		if a.cfg.WatchFanoutGet != nil {
			opts = append(opts, watchfanoutclient.WithGetInProcess(0, a.cfg.WatchFanoutGet))
		}
		svc.watchfanout = watchfanoutclient.New(conns, opts...)
		svc.dependencies = append(svc.dependencies, watchfanoutCheck(conns))
	}
	return svc, nil
}

// newHealthChecks returns the checks of the health endpoints, with
// kube-apiserver's meanings. /livez has only "ping": it fails only when the
// process must be restarted, and a restart mends no dependency. /readyz
// fails only when the gateway cannot serve: the store does not answer
// ("store"), a configured KMS plugin does not ("kms-providers"), or
// shutdown has begun ("shutdown"). The other services'
// checks (dependencies) are optional: a failure shows as degraded. They
// run in the background (healthz.Monitor) until bg ends, so that a
// service that does not answer does not hold /readyz up. /healthz is
// /readyz without "shutdown".
func (a *App) newHealthChecks(bg context.Context, store grpc.ClientConnInterface, crypt *storagecrypt.Transformer, dependencies []healthz.Check) (healthChecks, error) {
	monitor, err := healthz.NewMonitor(healthz.MonitorConfig{
		Checks: dependencies, Registerer: a.cfg.Registerer, Logger: a.cfg.Logger,
	})
	if err != nil {
		return healthChecks{}, fmt.Errorf("apigateway: %w", err)
	}
	a.background(bg, monitor.Run)
	healthzChecks := []healthz.Check{storeCheck(store)}
	if crypt.HasKMS() {
		// As kube-apiserver's: without its KMS plugin the gateway can
		// neither write nor newly read what the plugin encrypts.
		healthzChecks = append(healthzChecks, healthz.Check{Name: "kms-providers", Run: crypt.Check})
	}
	healthzChecks = append(healthzChecks, monitor.Checks()...)
	return healthChecks{
		healthz: healthzChecks,
		readyz:  append(slices.Clip(healthzChecks), a.shutdownCheck()),
	}, nil
}

// healthChecks are the checks of /readyz and /healthz beyond "ping".
type healthChecks struct {
	readyz, healthz []healthz.Check
}

// errShuttingDown fails the "shutdown" readiness check.
var errShuttingDown = errors.New("apigateway: shutting down")

// shutdownCheck is kube-apiserver's "shutdown" readiness check: it fails
// from the moment shutdown begins, while the gateway still serves (for
// ShutdownDelay, then what is in flight), so that load balancers stop
// sending it requests.
func (a *App) shutdownCheck() healthz.Check {
	return healthz.Check{Name: "shutdown", Run: func(context.Context) error {
		if a.stopping.Load() {
			return errShuttingDown
		}
		return nil
	}}
}

// newHandler builds the REST front end in front of the resource server.
func (a *App) newHandler(bg context.Context, reg *registry.Registry, authenticator *authn.Authenticator, authorizer authz.Authorizer, auditor *audit.Auditor, rs *resources.Server, fc *flowcontrolclient.Client, work *worksize.Tracker, health healthChecks, sa *serviceaccount.Tokens) (http.Handler, error) {
	var metrics http.Handler
	if a.cfg.Gatherer != nil {
		metrics = promhttp.HandlerFor(a.cfg.Gatherer, promhttp.HandlerOpts{})
	}
	return frontend.New(bg, frontend.Config{
		Registry:        reg,
		Authenticator:   authenticator,
		Anonymous:       a.anonymousPolicy(),
		Authorizer:      authorizer,
		Auditor:         auditor,
		LocalResources:  rs,
		FlowControl:     fc,
		ServiceAccounts: sa,
		WorkSize:        work,
		Readyz:          health.readyz,
		Healthz:         health.healthz,
		Metrics:         metrics,
		Registerer:      a.cfg.Registerer,
		Logger:          a.cfg.Logger,
		RequestLogLevel: a.cfg.RequestLogLevel,
	})
}

// startControllers runs the namespace controller, the garbage collector,
// the ClusterRole aggregation controller, the ValidatingAdmissionPolicy
// status controller, the APF configuration
// controller, the CRD controller and the controllers of every namespace's default
// ServiceAccount and kube-root-ca.crt until bg ends.
func (a *App) startControllers(bg context.Context, reg *registry.Registry, c *codec.Codec, store *storage.Store, rs *resources.Server) error {
	namespaces, err := namespace.New(namespace.Config{Registry: reg, Codec: c, Store: store, Objects: rs, Logger: a.cfg.Logger, Interval: time.Second})
	if err != nil {
		return fmt.Errorf("apigateway: %w", err)
	}
	collector, err := gc.New(gc.Config{Registry: reg, Store: store, Objects: rs, Observer: rs, Logger: a.cfg.Logger, Retry: 2 * time.Second})
	if err != nil {
		return fmt.Errorf("apigateway: %w", err)
	}
	aggregation, err := clusterroleaggregation.New(clusterroleaggregation.Config{Registry: reg, Codec: c, Store: store, Objects: rs, Logger: a.cfg.Logger})
	if err != nil {
		return fmt.Errorf("apigateway: %w", err)
	}
	acfg := apfconfig.Config{Registry: reg, Codec: c, Store: store, Objects: rs, User: apiserverUser, Logger: a.cfg.Logger}
	if a.fallback != nil {
		acfg.Sink = a.fallback.Configure
	}
	apfCtl, err := apfconfig.New(acfg)
	if err != nil {
		return fmt.Errorf("apigateway: %w", err)
	}
	a.background(bg, apfCtl.Run)
	a.background(bg, namespaces.Run)
	a.background(bg, collector.Run)
	a.background(bg, aggregation.Run)
	vapStatus, err := vapstatus.New(vapstatus.Config{Registry: reg, Codec: c, Store: store, Objects: rs, Logger: a.cfg.Logger})
	if err != nil {
		return fmt.Errorf("apigateway: %w", err)
	}
	a.background(bg, vapStatus.Run)
	if err := a.startCRDController(bg, reg, c, store, rs); err != nil {
		return err
	}
	return a.startNamespaceObjects(bg, reg, c, store, rs)
}

// background runs f(ctx) in a goroutine that Close waits for.
func (a *App) background(ctx context.Context, f func(context.Context)) {
	a.wg.Add(1)
	go func() { defer a.wg.Done(); f(ctx) }()
}

// servingTLS is the configuration of both APIs, HTTPS and gRPC.
func servingTLS(cfg Config) *tls.Config {
	tlsConf := cfg.ServingTLS.Clone()
	if cfg.ClientCAs != nil {
		// Certificates are asked for, not verified by the handshake:
		// authn verifies them against ClientCAs, so that one it refuses
		// (an internal certificate, another CA's) gets 401, as
		// kube-apiserver answers, rather than a failed handshake.
		tlsConf.ClientCAs = cfg.ClientCAs
		tlsConf.ClientAuth = tls.RequestClientCert
	}
	return tlsConf
}

// newHTTPServer is the HTTPS API's server: net/http serves HTTP/1.1,
// h2conn every HTTP/2 connection.
func newHTTPServer(handler http.Handler, tlsConf *tls.Config, log *slog.Logger) *http.Server {
	hs := &http.Server{
		Handler:           handler,
		TLSConfig:         tlsConf.Clone(),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       90 * time.Second,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	h2conn.Configure(hs, &h2conn.Server{
		// 1,000 concurrent streams per HTTP/2 connection, as
		// kube-apiserver allows (--http2-max-streams-per-connection):
		// each watch is a stream, and clients multiplex many over one
		// connection.
		MaxConcurrentStreams: 1000,
		MaxHeaderListSize:    1 << 20,
		IdleTimeout:          90 * time.Second,
		Logger:               log,
	})
	return hs
}

// dial connects to one service's address; Close closes the connection.
func (a *App) dial(addr string) (*grpc.ClientConn, error) {
	conn, err := grpcclient.Dial(addr, a.cfg.ClientTLS, a.cfg.DialOptions...)
	if err != nil {
		return nil, fmt.Errorf("apigateway: dial %s: %w", addr, err)
	}
	a.conns = append(a.conns, conn)
	return conn, nil
}

// Serve serves the HTTPS API on lis until Close. It returns nil after
// Close.
func (a *App) Serve(lis net.Listener) error {
	a.serving.Store(true)
	err := a.http.ServeTLS(coalesce.NewListener(lis), "", "")
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ServeGRPC serves the gRPC API (meridian.api.v1.ResourceService and gRPC
// health) on lis until Close, with the same TLS, authentication and flow
// control as the HTTPS API. It returns nil after Close.
func (a *App) ServeGRPC(lis net.Listener) error {
	a.serving.Store(true)
	err := a.grpc.Serve(lis)
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// drainTimeout is how long requests in flight get to finish once the
// listeners have closed; watches, which never finish by themselves, are
// cut then (clients re-watch).
const drainTimeout = 5 * time.Second

// Close shuts the gateway down (Shutdown) with no deadline of its own. It
// is safe to call more than once.
func (a *App) Close() error { return a.Shutdown(context.Background()) }

// Shutdown stops the gateway as kube-apiserver stops on SIGTERM. /readyz
// fails at once ("shutdown"); if the gateway is serving, it goes on
// accepting and serving requests for Config.ShutdownDelay, so that load
// balancers see the failing readiness and send it no more; then the
// listeners close, requests in flight get up to drainTimeout to finish,
// the rest are cut, and the connections to the other services close. ctx
// ending cuts both waits short. The first call does the work; later ones
// (Close included) wait for it and return its result.
func (a *App) Shutdown(ctx context.Context) error {
	a.once.Do(func() { a.closeErr = a.shutdown(ctx) })
	return a.closeErr
}

func (a *App) shutdown(ctx context.Context) error {
	a.stopping.Store(true)
	if a.grpc != nil {
		a.grpc.Drain()
	}
	if d := a.cfg.ShutdownDelay; d > 0 && a.serving.Load() {
		a.log.Info("shutting down: /readyz fails, serving on for the shutdown delay", "delay", d)
		delay := time.NewTimer(d)
		select {
		case <-delay.C:
		case <-ctx.Done():
			delay.Stop()
		}
	}
	var errs []error
	if a.http != nil {
		drain, cancel := context.WithTimeout(ctx, drainTimeout)
		// Watches never finish by themselves: Shutdown waits for them
		// until the deadline, then Close cuts them.
		if err := a.http.Shutdown(drain); err != nil {
			_ = a.http.Close()
		}
		cancel()
	}
	if a.grpc != nil {
		drain, cancel := context.WithTimeout(ctx, drainTimeout)
		stopped := make(chan struct{})
		go func() { a.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-drain.Done():
			a.grpc.Stop()
			<-stopped
		}
		cancel()
	}
	if a.cancel != nil {
		a.cancel()
	}
	// The background work (flow control's last releases among it)
	// ends before the connections it uses close.
	a.wg.Wait()
	for _, c := range a.conns {
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, c := range a.closers {
		if err := c(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// storeCheck is ready when the store answers a linearizable read: a
// leader is reachable and serving.
func storeCheck(c grpc.ClientConnInterface) healthz.Check {
	kv := storev1.NewKVServiceClient(c)
	return healthz.Check{Name: "store", Run: func(ctx context.Context) error {
		_, err := kv.Range(ctx, &storev1.RangeRequest{Key: []byte{0}, CountOnly: true})
		return err
	}}
}

// watchfanoutCheck passes when some replica of watchfanout serves
// watches (its cache has synced with the store). It is optional: without
// a replica, the store serves watches and reads (package resources).
func watchfanoutCheck(conns []*grpc.ClientConn) healthz.Check {
	return grpcHealthCheck("watchfanout", watchv1.WatchService_ServiceDesc.ServiceName, conns, "watches and reads are served by the store")
}

// grpcHealthCheck is an optional check asking the gRPC health endpoint
// of a service's replicas about service ("": the server); it passes when
// one of them serves. degraded says what the gateway serves differently
// while it fails.
func grpcHealthCheck(name, service string, conns []*grpc.ClientConn, degraded string) healthz.Check {
	clients := make([]healthpb.HealthClient, 0, len(conns))
	for _, conn := range conns {
		clients = append(clients, healthpb.NewHealthClient(conn))
	}
	return healthz.Check{Name: name, Degraded: degraded, Run: func(ctx context.Context) error {
		// One replica serving is enough: the others are its standbys.
		var errs []error
		for _, client := range clients {
			resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
			switch {
			case err != nil:
				errs = append(errs, err)
			case resp.GetStatus() != healthpb.HealthCheckResponse_SERVING:
				errs = append(errs, fmt.Errorf("%s is %s", name, resp.GetStatus()))
			default:
				return nil
			}
		}
		return errors.Join(errs...)
	}}
}
