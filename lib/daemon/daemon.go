// Package daemon is the common shape of a meridian service binary: the
// flags every service has (listen address, mTLS files, trusted and calling
// organizations, metrics address, logging), and Run, which turns them into
// a logger, a metrics registry, a TLS configuration, a trust rule and the
// callers' organizations, serves the service until SIGINT or SIGTERM, and
// shuts it down cleanly.
package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/health"

	"github.com/meridian-cp/meridian/lib/healthz"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/memtrim"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/telemetry"
)

// Flags are the flags every service binary has.
type Flags struct {
	// Listen is the gRPC listen address.
	Listen string
	// TLSCertFile and TLSKeyFile are the serving certificate and key;
	// both empty serves plaintext (development only).
	TLSCertFile, TLSKeyFile string
	// ClientCAFile makes the server require and verify client
	// certificates signed by these CAs (mTLS): the internal CA. Required
	// with TLS, since callers are authorized by their certificates.
	ClientCAFile string
	// TrustedOrganization is the O= of client certificates whose holders
	// may assert users in metadata; empty trusts nobody.
	TrustedOrganization string
	// CallerOrganizations is a comma-separated list of the O= of client
	// certificates allowed to call the service (health checks are open to
	// all); default identity.GatewayOrganization.
	CallerOrganizations string
	// MetricsListen is the address of the plaintext HTTP server of
	// /metrics, /livez, /readyz and /healthz; empty disables it.
	MetricsListen string
	// Pprof serves net/http/pprof under /debug/pprof/ beside /metrics.
	Pprof bool
	// LogLevel is debug, info, warn or error; LogFormat json or text.
	LogLevel, LogFormat string
	// Memory is the soft memory limit and the idle release of free heap.
	Memory memtrim.Options
}

// Register defines the flags on fs with the given default addresses
// (lib/ports holds every service's).
func (f *Flags) Register(fs *flag.FlagSet, defaultListen, defaultMetricsListen string) {
	fs.StringVar(&f.Listen, "listen", defaultListen, "gRPC listen address (host:port; the default is loopback only: give this host's address, or 0.0.0.0, to serve other hosts, with TLS)")
	fs.StringVar(&f.TLSCertFile, "tls-cert-file", "", "serving certificate (PEM), read again within 5s when it or the key changes; empty serves plaintext, for development only")
	fs.StringVar(&f.TLSKeyFile, "tls-key-file", "", "serving certificate's private key (PEM)")
	fs.StringVar(&f.ClientCAFile, "client-ca-file", "", "CA bundle (PEM) to verify client certificates against (the internal CA): every client must present one (mTLS); required with --tls-cert-file")
	fs.StringVar(&f.TrustedOrganization, "trusted-organization", identity.GatewayOrganization, "organization (O=) of client certificates allowed to assert users in request metadata; empty trusts nobody")
	fs.StringVar(&f.CallerOrganizations, "caller-organizations", identity.GatewayOrganization, "comma-separated organizations (O=) of client certificates allowed to call this service; others get PERMISSION_DENIED (health checks are open to all)")
	fs.StringVar(&f.MetricsListen, "metrics-listen", defaultMetricsListen, "address of the plaintext HTTP server of /metrics and the health endpoints /livez, /readyz, /healthz (kubelet's probes); empty disables it")
	fs.BoolVar(&f.Pprof, "pprof", false, "serve net/http/pprof under /debug/pprof/ on --metrics-listen")
	fs.StringVar(&f.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.LogFormat, "log-format", "json", "log format: json or text")
	f.Memory.AddFlags(fs)
}

// Validate reports every problem with the flags at once.
func (f *Flags) Validate() error {
	var errs []error
	if f.Listen == "" {
		errs = append(errs, errors.New("--listen is required"))
	}
	errs = append(errs, CheckServingTLSFlags(f.TLSCertFile, f.TLSKeyFile, f.ClientCAFile)...)
	if f.Pprof && f.MetricsListen == "" {
		errs = append(errs, errors.New("--pprof needs --metrics-listen"))
	}
	if len(f.Callers()) == 0 {
		errs = append(errs, errors.New("--caller-organizations names no organization"))
	}
	if _, err := telemetry.NewLogger(io.Discard, f.LogLevel, f.LogFormat); err != nil {
		errs = append(errs, err)
	}
	if _, err := f.Memory.Limit(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// TLS loads the server TLS configuration the flags name; nil when
// plaintext. The certificate and key are read again when they change
// (pki.KeyPairReloader), and log logs those reloads.
func (f *Flags) TLS(log *slog.Logger) (*tls.Config, error) {
	if f.TLSCertFile == "" {
		return nil, nil
	}
	return pki.LoadServerTLS(f.TLSCertFile, f.TLSKeyFile, f.ClientCAFile, log)
}

// Trust returns the trust rule the flags name; nil trusts nobody.
func (f *Flags) Trust() identity.TrustFunc {
	if f.TrustedOrganization == "" {
		return nil
	}
	return identity.TrustOrganization(f.TrustedOrganization)
}

// Callers returns the organizations --caller-organizations names.
func (f *Flags) Callers() []string {
	var out []string
	for _, o := range strings.Split(f.CallerOrganizations, ",") {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, o)
		}
	}
	return out
}

// Env is what Run gives the service constructor.
type Env struct {
	Logger   *slog.Logger
	Registry *prometheus.Registry
	// TLS is nil when serving plaintext.
	TLS   *tls.Config
	Trust identity.TrustFunc
	// Callers are the organizations allowed to call the service (enforced
	// when TLS is set).
	Callers []string
	// TracerProvider is the process's, set up from the OTEL_* environment
	// variables (telemetry.TracingFromEnv); a no-op provider when tracing
	// is off.
	TracerProvider trace.TracerProvider
}

// Server is a built service: app.App of each service satisfies it.
type Server interface {
	// Serve serves on lis until Close, then returns nil.
	Serve(lis net.Listener) error
	// Close stops the service gracefully; safe to call twice.
	Close() error
	// Health returns the service's gRPC health server and the service
	// names besides "" whose status is its readiness (healthz.GRPC):
	// /readyz and /healthz on --metrics-listen answer from it.
	Health() (*health.Server, []string)
}

// Run validates f, listens on f.Listen (and f.MetricsListen), builds the
// environment (tracing from the OTEL_* variables: TracingFromEnv of
// lib/telemetry, flushed when Run returns), calls build, serves the result (and, on f.MetricsListen,
// /metrics, /livez, /readyz and /healthz: ServeHealth) until ctx is done
// or SIGINT/SIGTERM arrives, then closes it. The metrics listener is
// served until Close has returned, so that /readyz answers NOT ready while
// the service drains. Logs go to logOut. It
// listens before it builds, so that an address in use fails the start at
// once, with an error naming the flag to set. It returns nil after a
// clean shutdown.
func Run(ctx context.Context, name string, f *Flags, logOut io.Writer, build func(context.Context, Env) (Server, error)) error {
	if err := f.Validate(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	logger, err := telemetry.NewLogger(logOut, f.LogLevel, f.LogFormat)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	logger = logger.With("service", name)
	if err := f.Memory.Start(ctx, logger); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	tlsConf, err := f.TLS(logger)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if tlsConf == nil {
		logger.Warn("serving plaintext gRPC: development only; no peer may assert users and every caller may call")
	}
	lis, err := Listen(ctx, "listen", f.Listen)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	var metricsLis net.Listener
	if f.MetricsListen != "" {
		if metricsLis, err = Listen(ctx, "metrics-listen", f.MetricsListen); err != nil {
			lis.Close()
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	tracing, err := telemetry.TracingFromEnv(ctx, name, logger)
	if err != nil {
		lis.Close()
		if metricsLis != nil {
			metricsLis.Close()
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	defer ShutdownTracing(ctx, tracing, logger)
	env := Env{Logger: logger, Registry: telemetry.NewRegistry(), TLS: tlsConf, Trust: f.Trust(), Callers: f.Callers(), TracerProvider: tracing.Provider}

	srv, err := build(ctx, env)
	if err != nil {
		lis.Close()
		if metricsLis != nil {
			metricsLis.Close()
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	if metricsLis != nil {
		// Served until Run returns, past the drain in srv.Close.
		httpCtx, stopHTTP := context.WithCancel(context.WithoutCancel(ctx))
		defer stopHTTP()
		if err := ServeHealth(httpCtx, metricsLis, env.Registry, logger, f.Pprof, srv.Health); err != nil {
			srv.Close()
			metricsLis.Close()
			lis.Close()
			return fmt.Errorf("%s: %w", name, err)
		}
		logger.Info("metrics serving", "addr", metricsLis.Addr().String(), "pprof", f.Pprof)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()

	select {
	case err := <-served:
		srv.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	cerr := srv.Close()
	serr := <-served
	if err := errors.Join(cerr, serr); err != nil {
		return fmt.Errorf("%s: shutdown: %w", name, err)
	}
	logger.Info("stopped")
	return nil
}

// ShutdownTracing flushes and stops t, waiting up to 5 seconds past ctx's
// end for the exporter, and logs a failure: spans of the last requests
// are worth a short wait at shutdown, not a failed exit.
func ShutdownTracing(ctx context.Context, t *telemetry.Tracing, logger *slog.Logger) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(sctx); err != nil {
		logger.Warn("tracing shutdown", "error", err)
	}
}

// Listen listens on TCP at addr, the value of the flag --name. When it
// cannot, the error names the flag (see ListenError).
func Listen(ctx context.Context, name, addr string) (net.Listener, error) {
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, ListenError(name, addr, err)
	}
	return lis, nil
}

// ListenError is err, the failure to listen at addr, the value of the
// flag --name, saying which flag it was; when the address is in use it
// says to set that flag, since another process or another instance on the
// same host (whose defaults are the same) holds the port.
func ListenError(name, addr string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("--%s %s is in use (by another process, or another instance on this host): set --%s to a free address: %w", name, addr, name, err)
	}
	return fmt.Errorf("--%s %s: %w", name, addr, err)
}

// ParseFlags parses args with fs. It returns flag.ErrHelp for -h, which
// callers should treat as success.
func ParseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	return nil
}

// CheckServingTLSFlags checks the serving TLS flags of a service binary,
// --tls-cert-file (cert), --tls-key-file (key) and --client-ca-file
// (clientCA): all empty (plaintext), or all set, since callers are
// authorized by their client certificates. It returns every problem.
func CheckServingTLSFlags(cert, key, clientCA string) []error {
	var errs []error
	if (cert == "") != (key == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-key-file must be set together"))
	}
	if clientCA != "" && cert == "" {
		errs = append(errs, errors.New("--client-ca-file needs --tls-cert-file and --tls-key-file"))
	}
	if cert != "" && clientCA == "" {
		errs = append(errs, errors.New("--tls-cert-file needs --client-ca-file: callers are authorized by their client certificates"))
	}
	return errs
}

// ServeHealth serves, on lis over plain HTTP until ctx is done, reg's
// /metrics (and net/http/pprof with profiles) and the health endpoints:
// /livez (the process serves HTTP: "ping"), /readyz and /healthz (the
// service's gRPC health status, healthz.GRPC of src), in kube-apiserver's
// format, recording their results in reg as kube-apiserver does. They say
// ok or not ok and nothing more, so they need no authentication, like
// kube-apiserver's for anonymous callers. The store, which does not use
// Run, serves its metrics address with it too.
func ServeHealth(ctx context.Context, lis net.Listener, reg *prometheus.Registry, logger *slog.Logger, profiles bool, src healthz.GRPCSource) error {
	m, err := healthz.NewMetrics(reg)
	if err != nil {
		return fmt.Errorf("health metrics: %w", err)
	}
	mux := telemetry.MetricsMux(reg, logger, profiles)
	healthz.Register(mux, m, nil, []healthz.Check{healthz.GRPC(src)})
	telemetry.ServeHTTP(ctx, lis, mux, logger)
	return nil
}
