// Package allinone runs the whole control plane in one process: the store
// (a single-node raft group), admission, flow control, watchfanout and
// the API gateway, each on its own gRPC server on loopback with mTLS
// between them, exactly as they run apart. It generates the PKI (two
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
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/telemetry"
	admission "github.com/meridian-cp/meridian/services/admission/app"
	gateway "github.com/meridian-cp/meridian/services/apigateway/app"
	flowcontrol "github.com/meridian-cp/meridian/services/flowcontrol/app"
	store "github.com/meridian-cp/meridian/services/store/app"
	watchfanout "github.com/meridian-cp/meridian/services/watchfanout/app"
	"github.com/prometheus/client_golang/prometheus"
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
	// Logger logs; nil means slog.Default().
	Logger *slog.Logger

	// Watchfanout tunes watchfanout; zero values keep its defaults.
	Watchfanout WatchfanoutConfig
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

	log     *slog.Logger
	closers []func() error // in start order; closed in reverse
	errc    chan error
	wg      sync.WaitGroup
	once    sync.Once
	err     error
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
	reg := telemetry.NewRegistry()
	wrap := func(svc string) prometheus.Registerer {
		return prometheus.WrapRegistererWith(prometheus.Labels{"service": svc}, reg)
	}
	logFor := func(svc string) *slog.Logger { return cfg.Logger.With("service", svc) }
	serverTLS := func(svc string) *tls.Config {
		return pki.ServerTLS(c.services[svc], c.internalCA.Pool(), tls.RequireAndVerifyClientCert)
	}
	trust := identity.TrustOrganization(identity.GatewayOrganization)

	st, err := store.New(ctx, store.Config{
		ID: "store-0", DataDir: filepath.Join(dataDir, "store"), Bootstrap: true,
		TLS: serverTLS("store"), Registerer: wrap("store"), Logger: logFor("store"),
	})
	if err != nil {
		return nil, fmt.Errorf("allinone: store: %w", err)
	}
	storeAddr, err := cp.serve("store", st)
	if err != nil {
		return nil, err
	}
	cp.StoreAddr = storeAddr
	adm, err := admission.New(ctx, admission.Config{TLS: serverTLS("admission"), Registerer: wrap("admission"), Logger: logFor("admission"), Trust: trust})
	if err != nil {
		return nil, fmt.Errorf("allinone: admission: %w", err)
	}
	admAddr, err := cp.serve("admission", adm)
	if err != nil {
		return nil, err
	}
	fc, err := flowcontrol.New(ctx, flowcontrol.Config{TLS: serverTLS("flowcontrol"), Registerer: wrap("flowcontrol"), Logger: logFor("flowcontrol"), Trust: trust})
	if err != nil {
		return nil, fmt.Errorf("allinone: flowcontrol: %w", err)
	}
	fcAddr, err := cp.serve("flowcontrol", fc)
	if err != nil {
		return nil, err
	}
	// The gateway and watchfanout serve the same resources.
	resources := registry.New(registry.Standard()...)
	wfCert := c.services["watchfanout"]
	wf, err := watchfanout.New(ctx, watchfanout.Config{
		StoreAddress: storeAddr, StoreTLS: pki.ClientTLS(&wfCert, c.internalCA.Pool(), ""),
		TLS: serverTLS("watchfanout"), Registerer: wrap("watchfanout"), Logger: logFor("watchfanout"), Trust: trust,
		BookmarkInterval: cfg.Watchfanout.BookmarkInterval, HistoryMaxEvents: cfg.Watchfanout.HistoryMaxEvents,
		Registry: resources,
	})
	if err != nil {
		return nil, fmt.Errorf("allinone: watchfanout: %w", err)
	}
	wfAddr, err := cp.serve("watchfanout", wf)
	if err != nil {
		return nil, err
	}
	cp.WatchFanoutAddr = wfAddr

	watchAddrs := []string{wfAddr}
	if cfg.DisableWatchfanout {
		watchAddrs = nil
	}
	gw, err := gateway.New(ctx, gateway.Config{
		StoreAddress: storeAddr, AdmissionAddress: admAddr, FlowControlAddress: fcAddr,
		WatchFanoutAddresses: watchAddrs,
		Registry:             resources,
		ClientTLS:            pki.ClientTLS(&c.gateway, c.internalCA.Pool(), ""),
		ServingTLS:           pki.ServerTLS(c.apiserver, nil, tls.NoClientCert),
		ClientCAs:            c.apiCA.Pool(),
		TokenAuthFile:        cfg.TokenAuthFile,
		Registerer:           wrap("apigateway"), Gatherer: reg,
		Logger: logFor("apigateway"),
	})
	if err != nil {
		return nil, fmt.Errorf("allinone: apigateway: %w", err)
	}
	cp.closers = append(cp.closers, gw.Close)
	cp.wg.Add(1)
	go func() {
		defer cp.wg.Done()
		if err := gw.Serve(apiLis); err != nil {
			cp.errc <- fmt.Errorf("apigateway: %w", err)
		}
	}()

	if cfg.GRPCListen != "" {
		glis, err := net.Listen("tcp", cfg.GRPCListen)
		if err != nil {
			return nil, fmt.Errorf("allinone: grpc listen: %w", err)
		}
		cp.GRPCAddr = glis.Addr()
		cp.wg.Add(1)
		go func() {
			defer cp.wg.Done()
			if err := gw.ServeGRPC(glis); err != nil {
				cp.errc <- fmt.Errorf("apigateway grpc: %w", err)
			}
		}()
	}

	cp.Kubeconfig = filepath.Join(dataDir, KubeconfigName)
	if err := writeKubeconfig(cp.Kubeconfig, "https://"+apiLis.Addr().String(), c); err != nil {
		return nil, err
	}
	return cp, nil
}

// serve starts svc on a loopback port and returns its address.
func (cp *ControlPlane) serve(name string, svc service) (string, error) {
	cp.closers = append(cp.closers, svc.Close)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("allinone: %s: listen: %w", name, err)
	}
	cp.wg.Add(1)
	go func() {
		defer cp.wg.Done()
		if err := svc.Serve(lis); err != nil {
			cp.errc <- fmt.Errorf("%s: %w", name, err)
		}
	}()
	return lis.Addr().String(), nil
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
