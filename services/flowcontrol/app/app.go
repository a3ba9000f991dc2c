// Package app assembles the flow-control service: the apf.Controller
// behind a gRPC server built by lib/grpcserver, configured from the
// FlowSchema and PriorityLevelConfiguration objects a configwatch.Follower
// reads from the store. The flowcontrol binary and the all-in-one binary
// both use it.
package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/meridian-cp/meridian/lib/flowcontrol/apf"
	"github.com/meridian-cp/meridian/lib/grpcserver"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/inproc"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/storagecrypt"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/flowcontrol/internal/configwatch"
	"github.com/meridian-cp/meridian/services/flowcontrol/internal/leaderelect"
	"github.com/meridian-cp/meridian/services/flowcontrol/internal/server"
	storeclient "github.com/meridian-cp/meridian/services/store/client"
)

// ServiceName is the gRPC service served, as reported by the health
// service.
const ServiceName = "meridian.flowcontrol.v1.FlowControlService"

// access is the policy of the service's callers: FlowControlService and
// DecisionService (the gateways' Decide streams) are open to the same
// organizations.
func access(callers []string) identity.Policy {
	p := identity.ServiceCallers(ServiceName, callers)
	maps.Copy(p, identity.ServiceCallers(flowcontrolv1.DecisionService_ServiceDesc.ServiceName, callers))
	return p
}

// Config configures the flow-control service. Zero values mean the
// defaults stated on each field.
type Config struct {
	// ConcurrencyLimit is the server concurrency limit, in seats, of the
	// whole fleet: the limited priority levels share it by their nominal
	// concurrency shares; default 600 (kube-apiserver's 400 + 200).
	ConcurrencyLimit int
	// StoreAddress is the comma-separated addresses of the store's
	// members, where the FlowSchema and PriorityLevelConfiguration objects
	// are read and watched. Empty serves the mandatory and suggested
	// configuration (apfbootstrap) only (tests, the load test).
	StoreAddress string
	// StoreTLS is the store client's TLS configuration, with a client
	// certificate of O=meridian:flowcontrol; nil dials plaintext (tests).
	StoreTLS *tls.Config
	// StoreDialOptions are added to the store client's connections, after
	// StoreTLS's credentials: the all-in-one's in-memory connections
	// (inproc.Listeners.DialOptions) replace them.
	StoreDialOptions []grpc.DialOption
	// EncryptionProviderConfig is the path of the EncryptionConfiguration
	// the gateways use, to read objects encrypted at rest; empty reads
	// them as stored.
	EncryptionProviderConfig string
	// MaxWait is the longest a request waits in its queue before it is
	// rejected with RESOURCE_EXHAUSTED; default 15s.
	MaxWait time.Duration
	// GrantLease is how long a gateway's grants outlive its last heartbeat;
	// default 30s.
	GrantLease time.Duration
	// RetryAfter is sent to rejected clients in RetryInfo; default 1s.
	RetryAfter time.Duration
	// LeaderElect runs the service as one of several replicas, of which
	// the one holding the Lease DefaultLeaseNamespace/DefaultLeaseName in
	// the store (leaderelect) serves seats and the others redirect the
	// gateways to it. It needs StoreAddress and Identity.
	LeaderElect bool
	// Identity is this replica's holderIdentity in the Lease: the address
	// the gateways reach it at, as listed in their --flowcontrol-address.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod of the election;
	// defaults leaderelect's (4s, 3s, 500ms).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// BorrowingPeriod is how often the priority levels' limits are
	// adjusted to their demand; default 10s, negative never (the load
	// test's fixed-capacity runs).
	BorrowingPeriod time.Duration

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

func (c *Config) apf() apf.Config {
	return apf.Config{
		ServerConcurrencyLimit: c.ConcurrencyLimit,
		MaxWait:                c.MaxWait,
		Lease:                  c.GrantLease,
		RetryAfter:             c.RetryAfter,
		BorrowingPeriod:        c.BorrowingPeriod,
		Registerer:             c.Registerer,
		Logger:                 c.logger(),
	}
}

func (c *Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.Default()
	}
	return c.Logger
}

// Validate reports every problem of c at once.
func (c *Config) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{
		{"ConcurrencyLimit", c.ConcurrencyLimit},
	} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %d", f.name, f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"MaxWait", c.MaxWait}, {"GrantLease", c.GrantLease}, {"RetryAfter", c.RetryAfter},
		{"LeaseDuration", c.LeaseDuration}, {"RenewDeadline", c.RenewDeadline}, {"RetryPeriod", c.RetryPeriod}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %s", f.name, f.v))
		}
	}
	if c.LeaderElect && (c.StoreAddress == "" || c.Identity == "") {
		errs = append(errs, errors.New("LeaderElect needs StoreAddress and Identity"))
	}
	if len(errs) == 0 && c.LeaderElect {
		if err := c.election(nil).Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		if err := c.apf().Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("flowcontrol: invalid config: %w", err)
	}
	return nil
}

// App is the flow-control service. New builds it, Serve serves it, Close
// stops it.
type App struct {
	ctrl *apf.Controller
	fc   *server.Server
	srv  *grpc.Server
	// bindUnary binds a unary handler into srv's chain of unary
	// interceptors, which ClientInProcess runs calls through.
	bindUnary func(*grpc.UnaryServerInfo, grpc.UnaryHandler) grpc.UnaryHandler
	health    *health.Server
	logger    *slog.Logger

	// follow stops the configuration's follower and the elector; store
	// and crypt are what they read with (nil without a store).
	follow   context.CancelFunc
	followed sync.WaitGroup
	// leader is this replica's place in the election; nil without one.
	leader *leadership
	store  *storeclient.Client
	crypt  *storagecrypt.Transformer

	closeOnce sync.Once
	closeErr  error
}

// New builds the service. It does not listen; call Serve. ctx is not
// retained.
func New(ctx context.Context, cfg Config) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctrl, err := apf.New(cfg.apf())
	if err != nil {
		return nil, fmt.Errorf("flowcontrol: %w", err)
	}
	sopts := grpcserver.Options{
		Service:        "flowcontrol",
		TLS:            cfg.TLS,
		Registerer:     cfg.Registerer,
		Logger:         cfg.Logger,
		Trust:          cfg.Trust,
		Access:         access(cfg.Callers),
		TracerProvider: cfg.TracerProvider,
		// The Decide streams' requests are decoded by hand.
		Extra: []grpc.ServerOption{grpc.ForceServerCodecV2(server.NewCodec())},
	}
	srv, hs, err := grpcserver.New(sopts)
	if err != nil {
		ctrl.Close()
		return nil, fmt.Errorf("flowcontrol: %w", err)
	}
	bindUnary, err := grpcserver.UnaryServerChain(sopts)
	if err != nil {
		ctrl.Close()
		return nil, fmt.Errorf("flowcontrol: %w", err)
	}
	a := &App{ctrl: ctrl, srv: srv, bindUnary: bindUnary, health: hs, logger: cfg.logger(), follow: func() {}}
	var gate server.Leadership
	if cfg.LeaderElect {
		a.leader = &leadership{}
		gate = a.leader
	}
	a.fc = server.New(ctrl, gate, cfg.TracerProvider)
	flowcontrolv1.RegisterFlowControlServiceServer(srv, a.fc)
	flowcontrolv1.RegisterDecisionServiceServer(srv, a.fc)
	hs.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	if cfg.StoreAddress != "" {
		if err := a.startFollower(ctx, cfg); err != nil {
			ctrl.Close()
			return nil, err
		}
	}
	return a, nil
}

// ClientInProcess returns a client of the service for a caller of this
// process holding cert (the all-in-one's gateway): its Acquire and
// ReleaseGrants run the service's handlers through the gRPC server's
// unary interceptors on the caller's goroutine, as calls over a
// connection dialed as cert would be authorized, with no encoding, no
// transport and no Decide stream (inproc.UnaryMethod); its other calls go over
// conn. Answers and errors are those of the gRPC methods.
func (a *App) ClientInProcess(cert *x509.Certificate, conn grpc.ClientConnInterface) flowcontrolv1.FlowControlServiceClient {
	return localClient{
		FlowControlServiceClient: flowcontrolv1.NewFlowControlServiceClient(conn),
		acquire:                  inproc.NewUnaryMethod(cert, &grpc.UnaryServerInfo{Server: a.fc, FullMethod: flowcontrolv1.FlowControlService_Acquire_FullMethodName}, a.bindUnary, a.fc.Acquire),
		release:                  inproc.NewUnaryMethod(cert, &grpc.UnaryServerInfo{Server: a.fc, FullMethod: flowcontrolv1.FlowControlService_ReleaseGrants_FullMethodName}, a.bindUnary, a.fc.ReleaseGrants),
	}
}

// localClient is ClientInProcess's client.
type localClient struct {
	flowcontrolv1.FlowControlServiceClient
	acquire *inproc.UnaryMethod[flowcontrolv1.AcquireRequest, flowcontrolv1.AcquireResponse]
	release *inproc.UnaryMethod[flowcontrolv1.ReleaseGrantsRequest, flowcontrolv1.ReleaseGrantsResponse]
}

// Acquire runs the service's Acquire in process; call options do not
// apply.
func (c localClient) Acquire(ctx context.Context, in *flowcontrolv1.AcquireRequest, _ ...grpc.CallOption) (*flowcontrolv1.AcquireResponse, error) {
	return c.acquire.Call(ctx, in)
}

// ReleaseGrants runs the service's ReleaseGrants in process; call options
// do not apply.
func (c localClient) ReleaseGrants(ctx context.Context, in *flowcontrolv1.ReleaseGrantsRequest, _ ...grpc.CallOption) (*flowcontrolv1.ReleaseGrantsResponse, error) {
	return c.release.Call(ctx, in)
}

// startFollower reads the configuration objects from the store and
// follows them until Close.
func (a *App) startFollower(ctx context.Context, cfg Config) error {
	crypt, err := storagecrypt.Load(ctx, cfg.EncryptionProviderConfig, storagecrypt.Options{Registry: registry.New(append(registry.FlowControl(), registry.Leases())...), Logger: a.logger})
	if err != nil {
		return fmt.Errorf("flowcontrol: encryption at rest: %w", err)
	}
	st, err := storeclient.Dial(storeclient.Endpoints(cfg.StoreAddress), cfg.StoreTLS, storeclient.Options{DialOptions: cfg.StoreDialOptions})
	if err != nil {
		_ = crypt.Close()
		return fmt.Errorf("flowcontrol: %w", err)
	}
	f, err := configwatch.New(configwatch.Config{
		Store: st, Sink: a.ctrl.Configure, Logger: a.logger,
		Decrypt: func(ctx context.Context, key string, value []byte) ([]byte, error) {
			plain, _, err := crypt.Decrypt(ctx, key, value)
			return plain, err
		},
	})
	if err != nil {
		_ = st.Close()
		_ = crypt.Close()
		return fmt.Errorf("flowcontrol: %w", err)
	}
	var elector *leaderelect.Elector
	if cfg.LeaderElect {
		ecfg := cfg.election(st.KV())
		ecfg.Encrypt = crypt.Encrypt
		ecfg.Decrypt = func(ctx context.Context, key string, value []byte) ([]byte, error) {
			plain, _, err := crypt.Decrypt(ctx, key, value)
			return plain, err
		}
		ecfg.OnStartedLeading = func(term context.Context) {
			// A term starts empty: an AdoptGrants that raced with the
			// end of this replica's previous term may have left grants
			// behind; the gateways re-register what they hold.
			a.ctrl.Forget()
			a.leader.start(term)
		}
		ecfg.OnStoppedLeading = func() {
			a.leader.stop()
			// Nothing held in this term outlives it: the gateways take
			// their seats from the next leader.
			if n := a.ctrl.Forget(); n > 0 {
				a.logger.Warn("flow control: no longer leading; released the grants of the term", "grants", n)
			}
		}
		if elector, err = leaderelect.New(ecfg); err != nil {
			_ = st.Close()
			_ = crypt.Close()
			return fmt.Errorf("flowcontrol: %w", err)
		}
		a.leader.elector = elector
		if cfg.Registerer != nil {
			if err := cfg.Registerer.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "leader_election_master_status", Help: "1 while this replica leads, else 0 (as client-go's).",
				ConstLabels: prometheus.Labels{"name": leaderelect.DefaultName},
			}, func() float64 {
				if _, leading := elector.Leader(); leading {
					return 1
				}
				return 0
			})); err != nil {
				_ = st.Close()
				_ = crypt.Close()
				return fmt.Errorf("flowcontrol: %w", err)
			}
		}
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	a.store, a.crypt, a.follow = st, crypt, cancel
	a.followed.Add(1)
	go func() { defer a.followed.Done(); f.Run(bg) }()
	if elector != nil {
		a.followed.Add(1)
		go func() { defer a.followed.Done(); elector.Run(bg) }()
	}
	return nil
}

// election is the elector's configuration, over kv.
func (c *Config) election(kv storev1.KVServiceClient) leaderelect.Config {
	return leaderelect.Config{
		KV: kv, Identity: c.Identity, Logger: c.logger(),
		LeaseDuration: c.LeaseDuration, RenewDeadline: c.RenewDeadline, RetryPeriod: c.RetryPeriod,
	}
}

// Serve serves gRPC on lis until Close; it returns nil after Close.
func (a *App) Serve(lis net.Listener) error {
	return grpcserver.Serve(a.srv, lis, "flowcontrol", a.logger)
}

// Health returns the gRPC health server and the name whose status is
// the service's readiness: NOT_SERVING once Close started
// (daemon.Server; /readyz on --metrics-listen).
func (a *App) Health() (*health.Server, []string) { return a.health, []string{ServiceName} }

// Close stops the service gracefully: health reports NOT_SERVING, queued
// Acquires fail with UNAVAILABLE (so gateways retry elsewhere at once
// instead of waiting out their queue), exemption streams end with
// UNAVAILABLE, and in-flight calls finish. It is safe to call more than
// once.
func (a *App) Close() error {
	a.closeOnce.Do(func() {
		a.health.Shutdown()
		// A leader gives its Lease up here, so that another replica
		// takes over at once.
		a.follow()
		a.followed.Wait()
		if a.store != nil {
			_ = a.store.Close()
			_ = a.crypt.Close()
		}
		a.closeErr = a.ctrl.Close()
		a.fc.Close()
		a.srv.GracefulStop()
	})
	return a.closeErr
}
