package telemetry

import (
	"net/http"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
)

// HTTPHandler returns h traced with tp: a server span per request,
// continuing the trace of a W3C traceparent header the client sent
// (kubectl and client-go can send one), named operation until the handler
// renames it (trace.SpanFromContext(r.Context()).SetName). When tp is nil
// or a no-op provider it returns h itself: tracing off costs nothing.
func HTTPHandler(h http.Handler, tp trace.TracerProvider, operation string) http.Handler {
	if !Recording(tp) {
		return h
	}
	return otelhttp.NewHandler(h, operation,
		otelhttp.WithTracerProvider(tp),
		otelhttp.WithPropagators(Propagator()),
		otelhttp.WithMeterProvider(metricnoop.NewMeterProvider()),
	)
}
