// Package app assembles the watchfanout service: a watch cache that
// follows the store (internal/cache) and meridian.watch.v1.WatchService
// on top of it (internal/server), with gRPC health and metrics. The
// watchfanout binary and the all-in-one binary both use it.
package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"

	"github.com/meridian-cp/meridian/lib/grpcserver"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/inproc"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/storagecrypt"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	storeclient "github.com/meridian-cp/meridian/services/store/client"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/batchcodec"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/server"
)

// ServiceName is the gRPC service served. Health reports it NOT_SERVING
// until the cache has synced with the store.
const ServiceName = "meridian.watch.v1.WatchService"

// Config configures the watchfanout service. The zero value of each
// optional field means its default.
type Config struct {
	// StoreAddress is the store whose watch stream the cache follows: the
	// gRPC address of one member (host:port, or a gRPC target URI such as
	// dns:///store:2479), or several members' addresses separated by
	// commas. With several, the store client follows leader changes: the
	// cache's watch and reads move to another member when one goes away,
	// and resume from the revision the cache reached. Required.
	StoreAddress string
	// StoreLocalAddress is the comma-separated addresses of the store
	// members in this replica's region or zone: the cache's watch and its
	// serializable reads go to them first (storeclient.Options.Local), so
	// a region's replica follows its own region's member. Empty: the watch
	// follows the leader.
	StoreLocalAddress string
	// StoreTLS is the client TLS configuration for the store (with a
	// client certificate for mTLS); nil dials plaintext (tests only).
	StoreTLS *tls.Config
	// StoreDialOptions are added to the store client's connections, after
	// StoreTLS's credentials: the all-in-one's in-memory connections
	// (inproc.Listeners.DialOptions) replace them.
	StoreDialOptions []grpc.DialOption
	// StoreConsistentRevision reads the store's current revision
	// linearizably in this process (the all-in-one's store,
	// App.ConsistentRevision): consistent reads then wait for it without
	// a call to the store. nil: they read it over the store connection.
	StoreConsistentRevision func(context.Context) (int64, error)

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

	// Registry lists the served resources; nil means registry.Standard(),
	// what the gateway serves by default: the two must agree, or watches
	// of the kinds only one serves fail.
	Registry *registry.Registry
	// EncryptionProviderConfig is the path of the apiserver.config.k8s.io/v1
	// EncryptionConfiguration the gateways encrypt with: the cache decrypts
	// what the store holds with it. Empty: values are stored as they are.
	EncryptionProviderConfig string
	// HistoryWindow is how long events stay in each resource's history
	// (watches from an older resourceVersion get 410); default 5m.
	HistoryWindow time.Duration
	// HistoryMaxEvents caps each resource's history; default 10000.
	HistoryMaxEvents int
	// WatcherBuffer is how many events may wait for one watcher before it
	// is cut off (ERROR 429; the client re-watches); default 1000.
	WatcherBuffer int
	// BookmarkInterval is the period of bookmarks to watchers that allow
	// them; default 1m.
	BookmarkInterval time.Duration
	// StartupReplay is how many revisions of the store's history the cache
	// replays on start, so clients of a restarted replica can resume;
	// default 10000 (bounded by the store's compaction).
	StartupReplay int64
	// WatchTimeout ends watches that asked for no timeout; default 30m.
	WatchTimeout time.Duration
	// ReadWaitTimeout bounds waits for the cache to reach a
	// resourceVersion; default 3s, then 504.
	ReadWaitTimeout time.Duration
	// InitialEventsConcurrency caps the watches sending their initial
	// state at once; default 16.
	InitialEventsConcurrency int
	// BufferPool provides the buffers watch batches are encoded into
	// (gRPC gives each back once written); nil means gRPC's default pool.
	// Tests set one that checks the buffers' lifetime.
	BufferPool mem.BufferPool
}

// Validate reports every problem of c at once.
func (c *Config) Validate() error {
	var errs []error
	eps := storeclient.Endpoints(c.StoreAddress)
	if len(eps) == 0 {
		errs = append(errs, errors.New("StoreAddress is required"))
	}
	for _, ep := range eps {
		if strings.Contains(ep, "://") {
			continue // a gRPC target URI; its resolver validates the rest
		}
		if _, _, err := net.SplitHostPort(ep); err != nil {
			errs = append(errs, fmt.Errorf("StoreAddress %q: want host:port or a gRPC target URI: %w", ep, err))
		}
	}
	for name, d := range map[string]time.Duration{"HistoryWindow": c.HistoryWindow, "BookmarkInterval": c.BookmarkInterval, "WatchTimeout": c.WatchTimeout, "ReadWaitTimeout": c.ReadWaitTimeout} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s %v is negative", name, d))
		}
	}
	for name, n := range map[string]int64{"HistoryMaxEvents": int64(c.HistoryMaxEvents), "WatcherBuffer": int64(c.WatcherBuffer), "StartupReplay": c.StartupReplay, "InitialEventsConcurrency": int64(c.InitialEventsConcurrency)} {
		if n < 0 {
			errs = append(errs, fmt.Errorf("%s %d is negative", name, n))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("watchfanout: invalid config: %w", err)
	}
	return nil
}

// App is the watchfanout service. New builds it and starts following the
// store, Serve serves it, Close stops it.
type App struct {
	srv *grpc.Server
	// ws is the WatchService srv serves; intercept is srv's chain of
	// stream interceptors, which StreamListInProcess runs calls
	// through, and bindUnary binds a unary handler into its chain of
	// unary interceptors (GetInProcess).
	ws        *server.Server
	intercept grpc.StreamServerInterceptor
	bindUnary func(*grpc.UnaryServerInfo, grpc.UnaryHandler) grpc.UnaryHandler

	health *health.Server
	logger *slog.Logger
	cfg    Config
	conn   *storeclient.Client
	cache  *cache.Cache
	crypt  *storagecrypt.Transformer

	cancel context.CancelFunc
	done   chan struct{} // closed when the cache's Run returned

	closeOnce sync.Once
}

// New builds the service and starts the cache, which follows the store in
// the background until Close (health turns SERVING once it has synced).
// ctx is not retained.
func New(ctx context.Context, cfg Config) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	reg := cfg.Registry
	if reg == nil {
		reg = registry.New(registry.Standard()...)
	}
	cdc, err := codec.New()
	if err != nil {
		return nil, fmt.Errorf("watchfanout: %w", err)
	}
	crypt, err := storagecrypt.Load(ctx, cfg.EncryptionProviderConfig, storagecrypt.Options{Registry: reg, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("watchfanout: encryption at rest: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = crypt.Close()
		}
	}()
	sopts := grpcserver.Options{
		Service:        "watchfanout",
		TLS:            cfg.TLS,
		Registerer:     cfg.Registerer,
		Logger:         cfg.Logger,
		Trust:          cfg.Trust,
		Access:         identity.ServiceCallers(ServiceName, cfg.Callers),
		TracerProvider: cfg.TracerProvider,
	}
	so, err := grpcserver.ServerOptions(sopts)
	if err != nil {
		return nil, fmt.Errorf("watchfanout: %w", err)
	}
	intercept, err := grpcserver.StreamServerInterceptor(sopts)
	if err != nil {
		return nil, fmt.Errorf("watchfanout: %w", err)
	}
	bindUnary, err := grpcserver.UnaryServerChain(sopts)
	if err != nil {
		return nil, fmt.Errorf("watchfanout: %w", err)
	}
	// Watch batches are sent encoded already (package batchcodec); every
	// other message goes through the proto codec as usual.
	wc, err := batchcodec.NewCodec()
	if err != nil {
		return nil, fmt.Errorf("watchfanout: %w", err)
	}
	srv := grpc.NewServer(append(so, grpc.ForceServerCodecV2(wc))...)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	// The store client routes the cache's watch and linearizable reads to
	// the member believed to lead, retries reads on another member, and
	// opens a new watch on another member when one cannot be opened; the
	// cache resumes its watch from the revision it reached.
	conn, err := storeclient.Dial(storeclient.Endpoints(cfg.StoreAddress), cfg.StoreTLS, storeclient.Options{
		Local: storeclient.Endpoints(cfg.StoreLocalAddress), DialOptions: cfg.StoreDialOptions,
	})
	if err != nil {
		return nil, fmt.Errorf("watchfanout: dial store: %w", err)
	}
	c, err := cache.New(cache.Options{
		Registry: reg, Codec: cdc,
		HistoryWindow: cfg.HistoryWindow, HistoryMaxEvents: cfg.HistoryMaxEvents, WatcherBuffer: cfg.WatcherBuffer,
		BookmarkInterval: cfg.BookmarkInterval, StartupReplay: cfg.StartupReplay,
		Registerer: cfg.Registerer, Logger: logger, Decrypter: crypt, TracerProvider: cfg.TracerProvider,
		ConsistentRevision: cfg.StoreConsistentRevision,
	}, conn)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("watchfanout: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	ws, err := server.New(server.Config{
		Cache: c, Codec: cdc, KV: storev1.NewKVServiceClient(conn), Stopping: runCtx.Done(),
		WatchTimeout: cfg.WatchTimeout, ReadWaitTimeout: cfg.ReadWaitTimeout, InitialEventsConcurrency: cfg.InitialEventsConcurrency,
		BufferPool: cfg.BufferPool,
	})
	if err != nil {
		cancel()
		conn.Close()
		return nil, fmt.Errorf("watchfanout: %w", err)
	}
	watchv1.RegisterWatchServiceServer(srv, ws)
	hs.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)

	a := &App{srv: srv, ws: ws, intercept: intercept, bindUnary: bindUnary, health: hs, logger: logger, cfg: cfg, conn: conn, cache: c, crypt: crypt, cancel: cancel, done: make(chan struct{})}
	ok = true
	go func() {
		defer close(a.done)
		_ = c.Run(runCtx)
	}()
	go func() {
		select {
		case <-c.Synced():
			logger.Info("watch cache synced with the store", "rev", c.Rev())
			hs.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
		case <-runCtx.Done():
		}
	}()
	return a, nil
}

// StreamListInProcess returns the service's StreamList for a caller of
// this process holding cert (the all-in-one's gateway): the call runs
// through the gRPC server's interceptors (access, identity, metrics,
// logging, tracing) as one over an in-memory connection dialed as cert
// would, but without a connection: each chunk of the list is handed to
// the caller as watchfanout wrote it, not encoded, framed, copied and
// decoded (inproc.ServerStream). Responses and errors are those of the
// gRPC method.
func (a *App) StreamListInProcess(cert *x509.Certificate) func(context.Context, *watchv1.StreamListRequest) (grpc.ServerStreamingClient[watchv1.StreamListResponse], error) {
	info := &grpc.StreamServerInfo{FullMethod: watchv1.WatchService_StreamList_FullMethodName, IsServerStream: true}
	return func(ctx context.Context, req *watchv1.StreamListRequest) (grpc.ServerStreamingClient[watchv1.StreamListResponse], error) {
		return inproc.ServerStream(ctx, cert, info, a.intercept, a.ws, req, a.ws.StreamList), nil
	}
}

// GetInProcess returns the service's Get for a caller of this process
// holding cert (the all-in-one's gateway): the call runs through the gRPC
// server's unary interceptors as StreamListInProcess's calls do, on the
// caller's goroutine, and the response is the message Get returned, not
// encoded, framed and decoded (inproc.UnaryMethod). Responses and errors are
// those of the gRPC method.
func (a *App) GetInProcess(cert *x509.Certificate) func(context.Context, *watchv1.GetRequest) (*watchv1.GetResponse, error) {
	return inproc.NewUnaryMethod(cert, &grpc.UnaryServerInfo{Server: a.ws, FullMethod: watchv1.WatchService_Get_FullMethodName}, a.bindUnary, a.ws.Get).Call
}

// Synced is closed once the cache has synced with the store.
func (a *App) Synced() <-chan struct{} { return a.cache.Synced() }

// Serve serves gRPC on lis until Close; it returns nil after Close.
func (a *App) Serve(lis net.Listener) error {
	return grpcserver.Serve(a.srv, lis, "watchfanout", a.logger, "store", a.cfg.StoreAddress, "store_tls", a.cfg.StoreTLS != nil)
}

// Health returns the gRPC health server and the name whose status is
// the service's readiness: NOT_SERVING until the cache synced and once
// Close started (daemon.Server; /readyz on --metrics-listen).
func (a *App) Health() (*health.Server, []string) { return a.health, []string{ServiceName} }

// Close stops the service: health reports NOT_SERVING, the cache stops
// (open watches end), in-flight calls finish. It is safe to call more than
// once.
func (a *App) Close() error {
	a.closeOnce.Do(func() {
		a.health.Shutdown()
		a.cancel()
		<-a.done // every watch is ended now
		stopped := make(chan struct{})
		go func() { a.srv.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(10 * time.Second):
			// A handler stuck sending to a client that does not read.
			a.srv.Stop()
			<-stopped
		}
		a.conn.Close()
		_ = a.crypt.Close()
	})
	return nil
}
