// Package app assembles the watchfanout service. The watch cache and
// fan-out come with their own issue; today the service serves gRPC health
// (meridian.watch.v1.WatchService NOT_SERVING) and metrics, and validates
// the configuration of its store connection. The watchfanout binary and
// the all-in-one binary both use it.
package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/meridian-cp/meridian/lib/grpcserver"
	"github.com/meridian-cp/meridian/lib/identity"
)

// ServiceName is the gRPC service this binary will serve. It is reported
// NOT_SERVING by the health service until the watch cache exists.
const ServiceName = "meridian.watch.v1.WatchService"

// Config configures the watchfanout service.
type Config struct {
	// StoreAddress is the gRPC target of the store whose watch stream the
	// cache will follow: host:port or a gRPC target URI such as
	// dns:///store:7001. Required.
	StoreAddress string
	// StoreTLS is the client TLS configuration for the store (with a
	// client certificate for mTLS); nil dials plaintext (tests only).
	StoreTLS *tls.Config

	// TLS is the server's TLS configuration; nil serves plaintext (tests
	// only).
	TLS *tls.Config
	// Registerer receives the metrics; nil means none.
	Registerer prometheus.Registerer
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Trust decides which mTLS peers may assert users; nil trusts none.
	Trust identity.TrustFunc
}

// Validate reports every problem of c at once.
func (c *Config) Validate() error {
	var errs []error
	switch {
	case c.StoreAddress == "":
		errs = append(errs, errors.New("StoreAddress is required"))
	case strings.Contains(c.StoreAddress, "://"):
		// A gRPC target URI; its resolver validates the rest.
	default:
		if _, _, err := net.SplitHostPort(c.StoreAddress); err != nil {
			errs = append(errs, fmt.Errorf("StoreAddress %q: want host:port or a gRPC target URI: %w", c.StoreAddress, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("watchfanout: invalid config: %w", err)
	}
	return nil
}

// App is the watchfanout service. New builds it, Serve serves it, Close
// stops it.
type App struct {
	srv    *grpc.Server
	health *health.Server
	logger *slog.Logger
	cfg    Config

	closeOnce sync.Once
}

// New builds the service. It does not listen and does not contact the
// store yet; call Serve. ctx is not retained.
func New(ctx context.Context, cfg Config) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	srv, hs, err := grpcserver.New(grpcserver.Options{
		Service:    "watchfanout",
		TLS:        cfg.TLS,
		Registerer: cfg.Registerer,
		Logger:     cfg.Logger,
		Trust:      cfg.Trust,
	})
	if err != nil {
		return nil, fmt.Errorf("watchfanout: %w", err)
	}
	// No WatchService is registered: clients get UNIMPLEMENTED, and health
	// says so ahead of the call.
	hs.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	return &App{srv: srv, health: hs, logger: logger, cfg: cfg}, nil
}

// Serve serves gRPC on lis until Close; it returns nil after Close.
func (a *App) Serve(lis net.Listener) error {
	a.logger.Info("watchfanout serving (watch cache not implemented yet; WatchService NOT_SERVING)",
		"addr", lis.Addr().String(), "store", a.cfg.StoreAddress, "store_tls", a.cfg.StoreTLS != nil)
	if err := a.srv.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("watchfanout: serve: %w", err)
	}
	return nil
}

// Close stops the service gracefully: health reports NOT_SERVING and
// in-flight calls finish. It is safe to call more than once.
func (a *App) Close() error {
	a.closeOnce.Do(func() {
		a.health.Shutdown()
		a.srv.GracefulStop()
	})
	return nil
}
