// Package app assembles the admission service: the policy pipeline behind
// a gRPC server built by lib/grpcserver. The admission binary and the
// all-in-one binary both use it.
package app

import (
	"context"
	"crypto/tls"
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

	"github.com/meridian-cp/meridian/lib/grpcserver"
	"github.com/meridian-cp/meridian/lib/identity"
	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/internal/policy"
	"github.com/meridian-cp/meridian/services/admission/internal/server"
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
	srv    *grpc.Server
	admit  *server.Server
	health *health.Server
	logger *slog.Logger // nil: slog.Default()

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
	srv, hs, err := grpcserver.New(grpcserver.Options{
		Service:        "admission",
		TLS:            cfg.TLS,
		Registerer:     cfg.Registerer,
		Logger:         cfg.Logger,
		Trust:          cfg.Trust,
		Access:         identity.ServiceCallers(ServiceName, cfg.Callers),
		MaxRecvMsgSize: maxRecv,
		TracerProvider: cfg.TracerProvider,
	})
	if err != nil {
		return nil, fmt.Errorf("admission: %w", err)
	}
	// No policy kinds are served yet: the empty set admits every request
	// and its scope is empty, so gateways send no writes here.
	s, err := server.New(policy.Empty{}, cfg.Registerer)
	if err != nil {
		return nil, err
	}
	admissionv1.RegisterAdmissionServiceServer(srv, s)
	hs.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	return &App{srv: srv, admit: s, health: hs, logger: cfg.Logger}, nil
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
		a.health.Shutdown()
		a.admit.Close()
		a.srv.GracefulStop()
	})
	return nil
}
