// Package allinone runs the whole control plane in one process: the store
// (a single-node raft group), admission, flow control, watchfanout and
// the API gateway, each on its own gRPC server, exactly as they run
// apart. Each backend serves on loopback with mTLS (for tools and tests:
// StoreAddr, WatchFanoutAddr) and on an in-memory listener (package
// inproc), which the gateway and the services' store clients dial: no
// TLS and no TCP between the services of the one process, while each
// server still authorizes its caller by the identity of the certificate
// the caller would present over mTLS. It generates the PKI (two
// CAs: one for the API and its users, one for the services; see pki.go),
// writes an admin kubeconfig, and keeps everything in one data directory
// so a restart keeps every object.
package allinone

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/inproc"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/memtrim"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/pkiplan"
	"github.com/meridian-cp/meridian/lib/telemetry"
	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	admission "github.com/meridian-cp/meridian/services/admission/app"
	gateway "github.com/meridian-cp/meridian/services/apigateway/app"
	flowcontrol "github.com/meridian-cp/meridian/services/flowcontrol/app"
	store "github.com/meridian-cp/meridian/services/store/app"
	watchfanout "github.com/meridian-cp/meridian/services/watchfanout/app"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// Config configures the control plane.
type Config struct {
	// DataDir holds the store, the CAs (ca/), the certificates (pki/) and
	// the kubeconfig. Required.
	DataDir string
	// Listen is the address of the HTTPS API, e.g. 127.0.0.1:6443.
	Listen string
	// GRPCListen is the address of the gRPC API (ResourceService); empty:
	// none.
	GRPCListen string
	// TokenAuthFile is a kube-apiserver static token file; empty: none.
	TokenAuthFile string
	// AuthorizationMode is the gateway's: RBAC (empty) or AlwaysAllow.
	AuthorizationMode string
	// OIDC is the gateway's OIDC authentication (--oidc-*); zero: none.
	OIDC gateway.OIDCOptions
	// DisableAnonymousAuth is the gateway's --anonymous-auth=false.
	DisableAnonymousAuth bool
	// EncryptionProviderConfig is an apiserver.config.k8s.io/v1
	// EncryptionConfiguration file (kube-apiserver's
	// --encryption-provider-config), given to the gateway and
	// watchfanout: the resources it names are encrypted in the store.
	// Empty: none.
	EncryptionProviderConfig string
	// Audit are the gateway's audit settings (kube-apiserver's
	// --audit-* flags); without a policy file nothing is audited.
	Audit gateway.AuditOptions
	// ServiceAccountIssuer is the "iss" of service account tokens; empty
	// means the API's URL (https://<Listen's address>), where the
	// discovery documents are served. The signing key is made in
	// DataDir/pki/sa.key (sa.pub: its public keys), once.
	ServiceAccountIssuer string
	// ServiceAccountMaxTokenExpiration caps the lifetime of new tokens;
	// 0: none but 2^32 seconds.
	ServiceAccountMaxTokenExpiration time.Duration
	// Logger logs; nil means slog.Default().
	Logger *slog.Logger
	// RequestLogLevel is the level of the gateway's one log line per API
	// request; nil means debug.
	RequestLogLevel slog.Leveler
	// TracerProvider traces requests through every service (each
	// service's spans under its own instrumentation scope,
	// meridian/<service>); nil: no tracing.
	TracerProvider trace.TracerProvider

	// Watchfanout tunes watchfanout; zero values keep its defaults.
	Watchfanout WatchfanoutConfig
	// FlowControl tunes flow control; zero values keep its defaults.
	FlowControl FlowControlConfig
	// ListBytesInFlight is the gateway's --list-bytes-in-flight; 0: its
	// default.
	ListBytesInFlight int64
	// MemoryPacer paces the process's garbage collector to the gateway's
	// list budget (app.Config.MemoryPacer); nil: not paced.
	MemoryPacer *memtrim.Pacer
	// StoreCacheBytes is the size of the store's pebble block cache; 0:
	// DefaultStoreCacheBytes.
	StoreCacheBytes int64
	// DisableWatchfanout gives the gateway no watchfanout address: it
	// serves watches and cached reads straight from the store, as when
	// watchfanout is down. watchfanout itself still runs.
	DisableWatchfanout bool
}

// WatchfanoutConfig tunes watchfanout.
type WatchfanoutConfig struct {
	// BookmarkInterval is the period of bookmarks (default 1m).
	BookmarkInterval time.Duration
	// HistoryMaxEvents caps each resource's event history (default 10000):
	// watches from before it get 410 Expired.
	HistoryMaxEvents int
}

// FlowControlConfig tunes flow control.
type FlowControlConfig struct {
	// ConcurrencyLimit is the server concurrency limit (seats) the
	// limited priority levels share by their nominal concurrency shares
	// (default 600).
	ConcurrencyLimit int
}

// DefaultStoreCacheBytes is the all-in-one store's pebble block cache,
// smaller than a store member's own default (128 MiB): in the all-in-one
// watchfanout serves lists, watches and reads at a revision from its own
// cache, so the store's block cache serves only consistent GETs and each
// write's look-up of its key's previous version. 32 MiB holds the blocks
// of ~10,000 objects of 1 KiB with their index, and memory a warm cache
// holds stays resident while the process is idle (docs/benchmarks.md,
// "Memory after load").
const DefaultStoreCacheBytes = 32 << 20

// StoreMemTableBytes is the all-in-one store's pebble memtable size,
// half of pebble's default (4 MiB): the store keeps two memtables'
// memory while idle (the one being filled and one kept for reuse), and
// flushing twice as often cost no measurable CPU per create
// (docs/benchmarks.md, "w/mem24c").
const StoreMemTableBytes = 2 << 20

// UpdateHintBytes bounds the gateway's copies of the objects it last
// wrote, a quarter of a gateway's own default (16 MiB): an update that
// finds no copy reads the object from the store, which in the all-in-one
// is a call over an in-memory connection rather than the network, and
// the copies stay resident while the process is idle (docs/benchmarks.md,
// "Memory after load").
const UpdateHintBytes = 4 << 20

// KubeconfigName is the admin kubeconfig's file name in the data dir.
const KubeconfigName = "admin.kubeconfig"

// ControlPlane is a running control plane.
type ControlPlane struct {
	// Addr is the address the API listens on.
	Addr net.Addr
	// GRPCAddr is the address of the gRPC API; nil when it is off.
	GRPCAddr net.Addr
	// StoreAddr is the store's gRPC address, for tools and tests that talk
	// to the store directly: mTLS, the store verified with
	// <data-dir>/pki/internal-ca.crt. The store answers only internal
	// certificates, each with what its identity may call:
	// <data-dir>/pki/operator.crt (O=meridian:operators) for membership,
	// compaction, snapshots and status; the gateway's
	// (apigateway-client.crt) for reading and writing keys. The admin
	// kubeconfig's certificate is refused.
	StoreAddr string
	// WatchFanoutAddr is watchfanout's gRPC address (mTLS with the
	// internal CA; only the gateway's certificate may call it).
	WatchFanoutAddr string
	// Kubeconfig is the path of the admin kubeconfig.
	Kubeconfig string

	log *slog.Logger
	// inproc are the backends' in-memory listeners, by service name.
	inproc inproc.Listeners
	// watchfanout serves the gateway's StreamList calls in process
	// (App.StreamListInProcess).
	watchfanout *watchfanout.App
	// flowcontrol decides the gateway's Acquire and ReleaseGrants in
	// process (App.ClientInProcess).
	flowcontrol *flowcontrol.App
	// admission answers the gateway's Admit calls in process
	// (App.ClientInProcess).
	admission *admission.App
	closers   []func() error // in start order; closed in reverse
	errc      chan error
	wg        sync.WaitGroup
	once      sync.Once
	err       error
}

// service is what every service's app package provides.
type service interface {
	Serve(net.Listener) error
	Close() error
}

// Start starts every service and returns once the API is serving.
//
// The goroutines Start begins read the local cp, never its named result,
// which an error return sets to nil while they may still run (the
// deferred Close stops them).
func Start(ctx context.Context, cfg Config) (_ *ControlPlane, err error) {
	if cfg.DataDir == "" {
		return nil, errors.New("allinone: DataDir is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("allinone: data dir: %w", err)
	}
	// The API listens first: its serving certificate names the address.
	apiLis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("allinone: listen: %w", err)
	}
	cp := &ControlPlane{Addr: apiLis.Addr(), log: cfg.Logger, errc: make(chan error, 8)}
	defer func() {
		if err != nil {
			_ = apiLis.Close()
			_ = cp.Close()
		}
	}()

	host, _, _ := net.SplitHostPort(apiLis.Addr().String())
	c, err := loadCerts(dataDir, host, cfg.Logger)
	if err != nil {
		return nil, err
	}
	sh := shared{
		certs:     c,
		metrics:   telemetry.NewRegistry(),
		log:       cfg.Logger,
		trust:     identity.TrustOrganization(identity.GatewayOrganization),
		resources: registry.New(registry.Standard()...),
	}
	if err := cp.startBackends(ctx, cfg, sh, dataDir); err != nil {
		return nil, err
	}
	if err := cp.startGateway(ctx, cfg, sh, apiLis); err != nil {
		return nil, err
	}

	cp.Kubeconfig = filepath.Join(dataDir, KubeconfigName)
	if err := writeKubeconfig(cp.Kubeconfig, "https://"+apiLis.Addr().String(), c); err != nil {
		return nil, err
	}
	return cp, nil
}

// shared is what the services' configurations have in common: the
// certificates, one metrics registry (each service's metrics labelled
// service=<name>), the logger, whom the services trust to assert users,
// and the served resources.
type shared struct {
	certs   *certs
	metrics *prometheus.Registry
	log     *slog.Logger
	trust   identity.TrustFunc
	// resources are served by the gateway and watchfanout: the same set
	// on both sides.
	resources *registry.Registry
}

// registerer is svc's view of the metrics registry.
func (sh shared) registerer(svc string) prometheus.Registerer {
	return prometheus.WrapRegistererWith(prometheus.Labels{"service": svc}, sh.metrics)
}

// logger is svc's logger.
func (sh shared) logger(svc string) *slog.Logger { return sh.log.With("service", svc) }

// serverTLS is svc's serving configuration: its certificate, and client
// certificates of the internal CA required.
func (sh shared) serverTLS(svc string) *tls.Config {
	return pki.ServerTLS(sh.certs.services[svc], sh.certs.internalCA.Pool(), tls.RequireAndVerifyClientCert)
}

// startBackends starts the store, admission, flow control and
// watchfanout, each on a loopback port and an in-memory listener, in that
// order: watchfanout follows the store. The services' store clients dial
// the store in memory, each as its own certificate.
func (cp *ControlPlane) startBackends(ctx context.Context, cfg Config, sh shared, dataDir string) error {
	cacheBytes := cfg.StoreCacheBytes
	if cacheBytes <= 0 {
		cacheBytes = DefaultStoreCacheBytes
	}
	var err error
	var st *store.App
	if st, cp.StoreAddr, err = startBackend(cp, "store", func() (*store.App, error) {
		return store.New(ctx, store.Config{
			ID: "store-0", DataDir: filepath.Join(dataDir, "store"), Bootstrap: true, CacheBytes: cacheBytes, MemTableBytes: StoreMemTableBytes,
			TLS: sh.serverTLS("store"), Registerer: sh.registerer("store"), Logger: sh.logger("store"), TracerProvider: cfg.TracerProvider,
		})
	}); err != nil {
		return err
	}
	storeTarget := inproc.Target("store")
	if cp.admission, _, err = startBackend(cp, "admission", func() (*admission.App, error) {
		adCert := sh.certs.services["admission"]
		storeDial, err := cp.dialOptions(adCert)
		if err != nil {
			return nil, err
		}
		return admission.New(ctx, admission.Config{
			StoreAddress: storeTarget, StoreTLS: pki.ClientTLS(&adCert, sh.certs.internalCA.Pool(), ""), StoreDialOptions: storeDial,
			EncryptionProviderConfig: cfg.EncryptionProviderConfig,
			TLS:                      sh.serverTLS("admission"), Registerer: sh.registerer("admission"), Logger: sh.logger("admission"), Trust: sh.trust,
			TracerProvider: cfg.TracerProvider,
		})
	}); err != nil {
		return err
	}
	if cp.flowcontrol, _, err = startBackend(cp, "flowcontrol", func() (*flowcontrol.App, error) {
		fcCert := sh.certs.services["flowcontrol"]
		storeDial, err := cp.dialOptions(fcCert)
		if err != nil {
			return nil, err
		}
		return flowcontrol.New(ctx, flowcontrol.Config{
			StoreAddress: storeTarget, StoreTLS: pki.ClientTLS(&fcCert, sh.certs.internalCA.Pool(), ""), StoreDialOptions: storeDial,
			EncryptionProviderConfig: cfg.EncryptionProviderConfig, ConcurrencyLimit: cfg.FlowControl.ConcurrencyLimit,
			TLS: sh.serverTLS("flowcontrol"), Registerer: sh.registerer("flowcontrol"), Logger: sh.logger("flowcontrol"), Trust: sh.trust,
			TracerProvider: cfg.TracerProvider,
		})
	}); err != nil {
		return err
	}
	if cp.watchfanout, cp.WatchFanoutAddr, err = startBackend(cp, "watchfanout", func() (*watchfanout.App, error) {
		wfCert := sh.certs.services["watchfanout"]
		storeDial, err := cp.dialOptions(wfCert)
		if err != nil {
			return nil, err
		}
		return watchfanout.New(ctx, watchfanout.Config{
			StoreAddress: storeTarget, StoreTLS: pki.ClientTLS(&wfCert, sh.certs.internalCA.Pool(), ""), StoreDialOptions: storeDial,
			// Consistent reads learn the store's revision without a call.
			StoreConsistentRevision: st.ConsistentRevision,
			TLS:                     sh.serverTLS("watchfanout"), Registerer: sh.registerer("watchfanout"), Logger: sh.logger("watchfanout"), Trust: sh.trust,
			BookmarkInterval: cfg.Watchfanout.BookmarkInterval, HistoryMaxEvents: cfg.Watchfanout.HistoryMaxEvents,
			Registry: sh.resources, EncryptionProviderConfig: cfg.EncryptionProviderConfig, TracerProvider: cfg.TracerProvider,
		})
	}); err != nil {
		return err
	}
	return nil
}

// startGateway starts the API gateway: its HTTPS API on apiLis and, when
// cfg.GRPCListen is set, its gRPC API there.
func (cp *ControlPlane) startGateway(ctx context.Context, cfg Config, sh shared, apiLis net.Listener) error {
	// The gateway's lists from watchfanout skip the connection: each
	// chunk is handed over as watchfanout wrote it, its calls still
	// authorized as the gateway's certificate's.
	watchAddrs, streamList := []string{inproc.Target("watchfanout")}, cp.watchfanout.StreamListInProcess(sh.certs.gateway.Leaf)
	// Its Gets too: consistent GETs are then served from watchfanout's
	// cache (resources.Server.cachedGet).
	get := cp.watchfanout.GetInProcess(sh.certs.gateway.Leaf)
	if cfg.DisableWatchfanout {
		watchAddrs, streamList, get = nil, nil, nil
	}
	sa, err := serviceAccounts(cfg, apiLis.Addr())
	if err != nil {
		return err
	}
	// The gateway's Acquire and ReleaseGrants are decided in process.
	flowControl := func(conn grpc.ClientConnInterface) flowcontrolv1.FlowControlServiceClient {
		return cp.flowcontrol.ClientInProcess(sh.certs.gateway.Leaf, conn)
	}
	// Its Admit calls too: no encoding of the AdmitRequest, no transport.
	admissionClient := func(conn grpc.ClientConnInterface) admissionv1.AdmissionServiceClient {
		return cp.admission.ClientInProcess(sh.certs.gateway.Leaf, conn)
	}
	dial, err := cp.dialOptions(sh.certs.gateway)
	if err != nil {
		return err
	}
	gw, _, err := startService(cp, "apigateway", func() (net.Listener, error) { return apiLis, nil }, func() (*gateway.App, error) {
		return gateway.New(ctx, gateway.Config{
			ServiceAccounts: sa,
			StoreAddress:    inproc.Target("store"), AdmissionAddress: inproc.Target("admission"), FlowControlAddress: inproc.Target("flowcontrol"),
			WatchFanoutAddresses:     watchAddrs,
			WatchFanoutStreamList:    streamList,
			WatchFanoutGet:           get,
			FlowControlInProcess:     flowControl,
			AdmissionInProcess:       admissionClient,
			DialOptions:              dial,
			Registry:                 sh.resources,
			ClientTLS:                pki.ClientTLS(&sh.certs.gateway, sh.certs.internalCA.Pool(), ""),
			ServingTLS:               pki.ServerTLS(sh.certs.apiserver, nil, tls.NoClientCert),
			ClientCAs:                sh.certs.apiCA.Pool(),
			TokenAuthFile:            cfg.TokenAuthFile,
			AuthorizationMode:        cfg.AuthorizationMode,
			OIDC:                     cfg.OIDC,
			DisableAnonymousAuth:     cfg.DisableAnonymousAuth,
			ListBytesInFlight:        cfg.ListBytesInFlight,
			MemoryPacer:              cfg.MemoryPacer,
			UpdateHintBytes:          UpdateHintBytes,
			RootCAFile:               pkiplan.APIAuthority.CertFile(cfg.DataDir),
			EncryptionProviderConfig: cfg.EncryptionProviderConfig,
			Audit:                    cfg.Audit,
			Registerer:               sh.registerer("apigateway"),
			Gatherer:                 sh.metrics,
			TracerProvider:           cfg.TracerProvider,
			RequestLogLevel:          cfg.RequestLogLevel,
			Logger:                   sh.logger("apigateway"),
		})
	})
	if err != nil {
		return err
	}
	if cfg.GRPCListen == "" {
		return nil
	}
	glis, err := net.Listen("tcp", cfg.GRPCListen)
	if err != nil {
		return fmt.Errorf("allinone: grpc listen: %w", err)
	}
	cp.GRPCAddr = glis.Addr()
	cp.serve("apigateway grpc", glis, gw.ServeGRPC)
	return nil
}

// startService starts one service: build makes it, listen opens its
// listener, and it serves there in the background until Close closes it
// (services close in the reverse of their start order). It returns the
// service and the address it serves on.
func startService[S service](cp *ControlPlane, name string, listen func() (net.Listener, error), build func() (S, error)) (S, string, error) {
	svc, err := build()
	if err != nil {
		return svc, "", fmt.Errorf("allinone: %s: %w", name, err)
	}
	cp.closers = append(cp.closers, svc.Close)
	lis, err := listen()
	if err != nil {
		return svc, "", fmt.Errorf("allinone: %s: listen: %w", name, err)
	}
	cp.serve(name, lis, svc.Serve)
	return svc, lis.Addr().String(), nil
}

// startBackend starts a backend service with startService on a loopback
// port, and serves it on the in-memory listener named name as well.
func startBackend[S service](cp *ControlPlane, name string, build func() (S, error)) (S, string, error) {
	svc, addr, err := startService(cp, name, onLoopback, build)
	if err != nil {
		return svc, addr, err
	}
	lis, err := cp.inproc.Listen(name)
	if err != nil {
		return svc, addr, fmt.Errorf("allinone: %s: %w", name, err)
	}
	cp.serve(name+" in memory", lis, svc.Serve)
	return svc, addr, nil
}

// dialOptions are the options that dial the backends' in-memory
// listeners (inproc.Target(name)) as the holder of cert: the servers
// authorize the call as if cert had been presented over mTLS.
func (cp *ControlPlane) dialOptions(cert tls.Certificate) ([]grpc.DialOption, error) {
	if cert.Leaf == nil {
		return nil, errors.New("allinone: a service certificate without its parsed leaf")
	}
	return cp.inproc.DialOptions(cert.Leaf), nil
}

// onLoopback listens on a free loopback port, where the services other
// than the API serve.
func onLoopback() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }

// serve runs serve(lis) in the background; an error it returns (a service
// that stopped on its own) goes to Err.
func (cp *ControlPlane) serve(name string, lis net.Listener, serve func(net.Listener) error) {
	cp.wg.Add(1)
	go func() {
		defer cp.wg.Done()
		if err := serve(lis); err != nil {
			cp.errc <- fmt.Errorf("%s: %w", name, err)
		}
	}()
}

// Err delivers the first error of a service that stopped on its own.
func (cp *ControlPlane) Err() <-chan error { return cp.errc }

// Close stops every service, the gateway first and the store last. It is
// safe to call more than once.
func (cp *ControlPlane) Close() error {
	cp.once.Do(func() {
		var errs []error
		for i := len(cp.closers) - 1; i >= 0; i-- {
			if err := cp.closers[i](); err != nil {
				errs = append(errs, err)
			}
		}
		cp.wg.Wait()
		cp.err = errors.Join(errs...)
	})
	return cp.err
}
