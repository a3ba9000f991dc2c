package telemetry

import (
	"context"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/stats"
)

// GRPCServerOptions returns the server option that traces every call but
// health checks with tp (otelgrpc's stats handler, W3C trace context from
// the caller's metadata), or none when tp is nil or a no-op provider, so
// a server with tracing off does no tracing work at all. The gRPC
// metrics stay lib/grpcserver's Prometheus ones (otelgrpc's meter is a
// no-op).
func GRPCServerOptions(tp trace.TracerProvider) []grpc.ServerOption {
	if !Recording(tp) {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(tp),
		otelgrpc.WithPropagators(Propagator()),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithFilter(filters.Not(filters.HealthCheck())),
	))}
}

// GRPCClientOption returns the dial option with which an outgoing call
// made under a span joins its trace: a client span child of the caller's,
// and the trace context sent in metadata. Calls made with no span in
// their context are not touched (the handler returns at once), so the
// option costs nothing when tracing is off; it needs no tracer provider
// (ContextTracerProvider).
func GRPCClientOption() grpc.DialOption {
	return grpc.WithStatsHandler(spanGated{otelgrpc.NewClientHandler(
		otelgrpc.WithTracerProvider(ContextTracerProvider()),
		otelgrpc.WithPropagators(Propagator()),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithFilter(filters.Not(filters.HealthCheck())),
	)})
}

// Recording reports whether tp may record spans: false for nil and the
// no-op provider.
func Recording(tp trace.TracerProvider) bool {
	if tp == nil {
		return false
	}
	_, isNoop := tp.(noop.TracerProvider)
	return !isNoop
}

// spanGated passes an RPC to h only when its context carries a valid
// span context. Tagging (TagRPC) and handling (HandleRPC) agree: a call
// h tagged holds h's client span in its context, one it did not tag holds
// none.
type spanGated struct{ h stats.Handler }

func (g spanGated) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	return g.h.TagRPC(ctx, info)
}

func (g spanGated) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	g.h.HandleRPC(ctx, s)
}

func (g spanGated) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	return ctx
}

func (g spanGated) HandleConn(context.Context, stats.ConnStats) {}
