package telemetry

import (
	"context"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// GRPCServerOptions returns the server option that traces, with tp, the
// calls (but health checks) whose caller sent a sampled W3C trace context
// in metadata, continuing the caller's trace (otelgrpc's stats handler);
// none when tp is nil or a no-op provider, so a server with tracing off
// does no tracing work at all. A call without a sampled trace context is
// not touched beyond one metadata lookup: meridian's servers continue
// traces the API request (or a gRPC API client) started and never start
// their own, which keeps tracing at a low sampling ratio nearly free.
// The gRPC metrics stay lib/grpcserver's Prometheus ones (otelgrpc's
// meter is a no-op).
func GRPCServerOptions(tp trace.TracerProvider) []grpc.ServerOption {
	if !Recording(tp) {
		return nil
	}
	return []grpc.ServerOption{grpc.StatsHandler(sampledCallers{otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(tp),
		otelgrpc.WithPropagators(Propagator()),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithFilter(filters.Not(filters.HealthCheck())),
	)})}
}

// sampledCallers passes an RPC to h only when the caller sent a sampled
// traceparent. Tagging and handling agree: a call h tagged holds h's
// server span in its context, one it did not tag holds none (a server's
// call contexts start empty).
type sampledCallers struct{ h stats.Handler }

func (g sampledCallers) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("traceparent"); len(v) == 0 || !sampledTraceparent(v[0]) {
		return ctx
	}
	return g.h.TagRPC(ctx, info)
}

func (g sampledCallers) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	g.h.HandleRPC(ctx, s)
}

func (g sampledCallers) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}

func (g sampledCallers) HandleConn(context.Context, stats.ConnStats) {}

// sampledTraceparent reports whether a W3C traceparent
// (version-traceid-parentid-flags) has the sampled flag set; the
// propagator validates the rest.
func sampledTraceparent(v string) bool {
	if len(v) < 2 {
		return false
	}
	var flags byte
	for _, c := range v[len(v)-2:] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = byte(c - '0')
		case c >= 'a' && c <= 'f':
			d = byte(c-'a') + 10
		default:
			return false
		}
		flags = flags<<4 | d
	}
	return flags&byte(trace.FlagsSampled) != 0
}

// GRPCClientOption returns the dial option with which an outgoing call
// made under a sampled span joins its trace: a client span child of the
// caller's, and the trace context sent in metadata. Other calls are not
// touched (the handler returns at once), so the option costs nothing when
// tracing is off or the request was not sampled; it needs no tracer
// provider (ContextTracerProvider).
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

// spanGated passes an RPC to h only when its context carries a sampled
// span. Tagging (TagRPC) and handling (HandleRPC) agree: a call h tagged
// holds h's sampled client span in its context, one it did not tag holds
// no sampled span.
type spanGated struct{ h stats.Handler }

func (g spanGated) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if !Traced(ctx) {
		return ctx
	}
	return g.h.TagRPC(ctx, info)
}

func (g spanGated) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if !Traced(ctx) {
		return
	}
	g.h.HandleRPC(ctx, s)
}

func (g spanGated) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	return ctx
}

func (g spanGated) HandleConn(context.Context, stats.ConnStats) {}
