// Package telemetry sets up what every meridian binary reports: a
// Prometheus registry served on /metrics and a log/slog logger.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry returns a new registry with the Go runtime and process
// collectors registered. Each binary makes one and passes it down; nothing
// registers on the global registry.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// NewLogger returns a logger writing to w at level (debug, info, warn or
// error; case-insensitive) in format (json or text). A record logged
// with a context holding a span (logger.InfoContext(ctx, ...)) carries
// its trace_id and span_id.
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	lvl, err := ParseLevel(level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(format) {
	case "json", "":
		return slog.New(traceHandler{slog.NewJSONHandler(w, opts)}), nil
	case "text":
		return slog.New(traceHandler{slog.NewTextHandler(w, opts)}), nil
	default:
		return nil, fmt.Errorf("telemetry: unknown log format %q (want json or text)", format)
	}
}

// ParseLevel parses a log level: debug, info (or empty), warn or error,
// case-insensitive.
func ParseLevel(level string) (slog.Level, error) {
	switch strings.ToLower(level) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("telemetry: unknown log level %q (want debug, info, warn or error)", level)
}

// ServeMetrics serves g on /metrics on lis, and with profiles
// net/http/pprof under /debug/pprof/ too (for benchmarks; never on by
// default), until ctx is done; then it shuts the server down, which closes
// lis (ServeHTTP of MetricsMux). Serving errors are logged. The caller
// listens, so that it can say which flag named a port that is taken.
func ServeMetrics(ctx context.Context, lis net.Listener, g prometheus.Gatherer, logger *slog.Logger, profiles bool) {
	ServeHTTP(ctx, lis, MetricsMux(g, logger, profiles), logger)
}

// MetricsMux returns a mux serving g on /metrics, and net/http/pprof under
// /debug/pprof/ when profiles is set; the caller may add routes (a
// service's health endpoints) before serving it.
func MetricsMux(g prometheus.Gatherer, logger *slog.Logger, profiles bool) *http.ServeMux {
	if logger == nil {
		logger = slog.Default()
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(logger.Handler(), slog.LevelError),
		ErrorHandling: promhttp.ContinueOnError,
	}))
	if profiles {
		RegisterProfiles(mux)
	}
	return mux
}

// ServeHTTP serves h over plain HTTP on lis in the background until ctx is
// done, then shuts the server down, letting requests in flight finish for
// up to 5 seconds. Errors other than the shutdown are logged on logger
// (nil: slog.Default()).
func ServeHTTP(ctx context.Context, lis net.Listener, h http.Handler, logger *slog.Logger) {
	if logger == nil {
		logger = slog.Default()
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("metrics server failed", "addr", lis.Addr().String(), "error", err)
		}
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close()
		}
	}()
}

// RegisterProfiles adds net/http/pprof's handlers under /debug/pprof/.
func RegisterProfiles(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}
