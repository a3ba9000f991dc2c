package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracer names (instrumentation scopes) of meridian's own spans: one per
// service, so that an operator can tell which service a span of the
// all-in-one (one process, one resource) belongs to.
const (
	ScopeGateway     = "meridian/apigateway"
	ScopeFlowControl = "meridian/flowcontrol"
	ScopeAdmission   = "meridian/admission"
	ScopeStore       = "meridian/store"
	ScopeWatchFanout = "meridian/watchfanout"
)

// Traced reports whether ctx carries a sampled span: whether a span
// started under it with StartSpan would be recorded. Callers check it
// before they compute span attributes.
func Traced(ctx context.Context) bool {
	return trace.SpanContextFromContext(ctx).IsSampled()
}

// StartSpan starts a span named name as a child of the span in ctx, with
// the tracer provider that started that span, scope naming the tracer.
// Internal spans follow their parent's sampling decision: when ctx holds
// no sampled span it returns ctx and a no-op span without allocating,
// which is what keeps tracing free when it is off or a request was not
// sampled. Components therefore need no tracer provider of their own:
// only the edges (the gRPC servers, the API's HTTP handler) do.
func StartSpan(ctx context.Context, scope, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.SpanContext().IsSampled() {
		return ctx, noopSpan
	}
	return parent.TracerProvider().Tracer(scope).Start(ctx, name, opts...)
}

var noopSpan = trace.SpanFromContext(context.Background())

// ContextTracerProvider returns a tracer provider whose tracers start
// each span with the provider of the span in the start context (a no-op
// one when there is none): what a gRPC client's stats handler uses, so
// that an outgoing call joins the caller's trace, and is sampled as it
// is, without the client being given a provider.
func ContextTracerProvider() trace.TracerProvider { return ctxProvider{} }

type ctxProvider struct{ embedded.TracerProvider }

func (ctxProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return ctxTracer{name: name, opts: opts}
}

type ctxTracer struct {
	embedded.Tracer
	name string
	opts []trace.TracerOption
}

func (t ctxTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.SpanContext().IsValid() {
		return noop.NewTracerProvider().Tracer(t.name).Start(ctx, name, opts...)
	}
	return parent.TracerProvider().Tracer(t.name, t.opts...).Start(ctx, name, opts...)
}

// Traceparent returns the W3C traceparent of the span in ctx when it is
// sampled, "" otherwise: how a span's context rides along with data that
// leaves the request's context (a raft log entry, a watch event) so that
// the work done on it later, elsewhere, joins the trace (StartRemoteSpan).
func Traceparent(ctx context.Context) string {
	if !Traced(ctx) {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}

// StartRemoteSpan starts a span named name, with tp's tracer scope, as a
// child of the span whose traceparent (Traceparent) is parent, when that
// span was sampled and tp records; otherwise it returns ctx and a no-op
// span without allocating.
func StartRemoteSpan(ctx context.Context, tp trace.TracerProvider, parent, scope, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if parent == "" || !Recording(tp) {
		return ctx, noopSpan
	}
	pctx := propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": parent})
	if !Traced(pctx) {
		return ctx, noopSpan
	}
	return tp.Tracer(scope).Start(pctx, name, opts...)
}
