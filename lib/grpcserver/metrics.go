package grpcserver

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meridian-cp/meridian/lib/telemetry"
)

// metrics are the gRPC server metrics, named as go-grpc-prometheus names
// them so existing dashboards work.
type metrics struct {
	started  *prometheus.CounterVec   // grpc_service, grpc_method
	handled  *prometheus.CounterVec   // grpc_service, grpc_method, grpc_code
	duration *prometheus.HistogramVec // grpc_service, grpc_method
	// series holds each method's series (full method name →
	// *methodSeries), looked up once: a vector's lookup hashes its labels
	// on every call.
	series sync.Map
}

// methodSeries are one method's series; handledOK is its
// grpc_server_handled_total series of code OK, the others are looked up
// when they occur.
type methodSeries struct {
	svc, method string
	started     prometheus.Counter
	handledOK   prometheus.Counter
	duration    prometheus.Observer
}

// of returns the series of fullMethod.
func (m *metrics) of(fullMethod string) *methodSeries {
	if s, ok := m.series.Load(fullMethod); ok {
		return s.(*methodSeries)
	}
	svc, method := splitMethod(fullMethod)
	s := &methodSeries{
		svc: svc, method: method,
		started:   m.started.WithLabelValues(svc, method),
		handledOK: m.handled.WithLabelValues(svc, method, codes.OK.String()),
		duration:  m.duration.WithLabelValues(svc, method),
	}
	actual, _ := m.series.LoadOrStore(fullMethod, s)
	return actual.(*methodSeries)
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
	s := m.of(info.FullMethod)
	s.started.Inc()
	start := time.Now()
	resp, err := handler(ctx, req)
	m.done(s, start, err)
	return resp, err
}

func (m *metrics) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	s := m.of(info.FullMethod)
	s.started.Inc()
	start := time.Now()
	err := handler(srv, ss)
	m.done(s, start, err)
	return err
}

func (m *metrics) done(s *methodSeries, start time.Time, err error) {
	if code := status.Code(err); code == codes.OK {
		s.handledOK.Inc()
	} else {
		m.handled.WithLabelValues(s.svc, s.method, code.String()).Inc()
	}
	s.duration.Observe(time.Since(start).Seconds())
}

// splitMethod splits "/pkg.Service/Method" into service and method.
func splitMethod(full string) (string, string) {
	full = strings.TrimPrefix(full, "/")
	if i := strings.LastIndexByte(full, '/'); i >= 0 {
		return full[:i], full[i+1:]
	}
	return "unknown", full
}
