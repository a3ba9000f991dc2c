package grpcserver

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/meridian-cp/meridian/lib/telemetry"
)

// metrics are the gRPC server metrics, named as go-grpc-prometheus names
// them so existing dashboards work.
type metrics struct {
	started  *prometheus.CounterVec   // grpc_service, grpc_method
	handled  *prometheus.CounterVec   // grpc_service, grpc_method, grpc_code
	duration *prometheus.HistogramVec // grpc_service, grpc_method
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	started, err := telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "grpc_server_started_total",
		Help: "Total number of RPCs started on the server.",
	}, []string{"grpc_service", "grpc_method"}))
	if err != nil {
		return nil, err
	}
	handled, err := telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "grpc_server_handled_total",
		Help: "Total number of RPCs completed on the server, regardless of success or failure.",
	}, []string{"grpc_service", "grpc_method", "grpc_code"}))
	if err != nil {
		return nil, err
	}
	duration, err := telemetry.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "grpc_server_handling_seconds",
		Help:    "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"grpc_service", "grpc_method"}))
	if err != nil {
		return nil, err
	}
	return &metrics{started: started, handled: handled, duration: duration}, nil
}

func (m *metrics) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	svc, method := splitMethod(info.FullMethod)
	m.started.WithLabelValues(svc, method).Inc()
	start := time.Now()
	resp, err := handler(ctx, req)
	m.done(svc, method, start, err)
	return resp, err
}

func (m *metrics) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	svc, method := splitMethod(info.FullMethod)
	m.started.WithLabelValues(svc, method).Inc()
	start := time.Now()
	err := handler(srv, ss)
	m.done(svc, method, start, err)
	return err
}

func (m *metrics) done(svc, method string, start time.Time, err error) {
	m.handled.WithLabelValues(svc, method, status.Code(err).String()).Inc()
	m.duration.WithLabelValues(svc, method).Observe(time.Since(start).Seconds())
}

// splitMethod splits "/pkg.Service/Method" into service and method.
func splitMethod(full string) (string, string) {
	full = strings.TrimPrefix(full, "/")
	if i := strings.LastIndexByte(full, '/'); i >= 0 {
		return full[:i], full[i+1:]
	}
	return "unknown", full
}
