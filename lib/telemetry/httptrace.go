package telemetry

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ScopeHTTP is the tracer name of the API's HTTP server spans.
const ScopeHTTP = "meridian/http"

// HTTPHandler returns h traced with tp: a server span per sampled
// request, named operation until the handler renames it
// (trace.SpanFromContext(r.Context()).SetName), continuing the trace of a
// W3C traceparent header the client sent (kubectl and client-go can send
// one) and following its sampling decision (tp's sampler decides for a
// request without one). A request that is not sampled is served with its
// context untouched, so nothing below it does tracing work; when tp is
// nil or a no-op provider HTTPHandler returns h itself. The handler
// records the response's status with HTTPStatus.
func HTTPHandler(h http.Handler, tp trace.TracerProvider, operation string) http.Handler {
	if !Recording(tp) {
		return h
	}
	return &httpTracer{next: h, tracer: tp.Tracer(ScopeHTTP), name: operation, prop: Propagator()}
}

type httpTracer struct {
	next   http.Handler
	tracer trace.Tracer
	name   string
	prop   propagation.TextMapPropagator
}

func (t *httpTracer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx := t.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := t.tracer.Start(ctx, t.name, trace.WithSpanKind(trace.SpanKindServer))
	if !span.IsRecording() {
		t.next.ServeHTTP(w, r)
		return
	}
	defer span.End()
	span.SetAttributes(
		attribute.String("http.request.method", r.Method),
		attribute.String("url.path", r.URL.Path),
		attribute.String("client.address", r.RemoteAddr),
		attribute.String("user_agent.original", r.UserAgent()),
	)
	t.next.ServeHTTP(w, r.WithContext(ctx))
}

// HTTPStatus records code, the status of the response to the request
// whose server span (HTTPHandler's) is in ctx; a 5xx marks the span
// failed, as the HTTP semantic conventions say.
func HTTPStatus(ctx context.Context, code int) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.Int("http.response.status_code", code))
	if code >= 500 {
		span.SetStatus(codes.Error, http.StatusText(code))
	}
}
