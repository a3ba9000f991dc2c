package telemetry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkHTTPHandler is the tracing work per API request at the HTTP
// edge and in one internal span, with tracing off, sampling 1% and
// sampling every request (spans kept in memory, not exported).
func BenchmarkHTTPHandler(b *testing.B) {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, span := StartSpan(r.Context(), ScopeGateway, "authenticate")
		span.End()
		HTTPStatus(r.Context(), http.StatusOK)
	})
	for _, bc := range []struct {
		name  string
		ratio float64
	}{{"off", -1}, {"ratio=0.01", 0.01}, {"ratio=1", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			h := http.Handler(inner)
			if bc.ratio >= 0 {
				tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()),
					sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(bc.ratio))))
				defer tp.Shutdown(context.Background())
				h = HTTPHandler(inner, tp, "apiserver")
			}
			r := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/default/configmaps/x", nil)
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, r)
			}
		})
	}
}
