package telemetry

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
)

// gRPC tracing is done by interceptors that hand a call to otelgrpc's
// stats handlers (its span names, attributes and status rules) only when
// the call is traced, rather than by installing those handlers on the
// server or connection: grpc-go calls an installed stats handler for every
// event of every call (copying the incoming metadata and allocating an
// event per header, message and trailer) even when the handler does
// nothing with it, which at a low sampling ratio cost more than the
// tracing itself. An untraced call costs one metadata lookup (server) or
// one context lookup (client).

// GRPCServerInterceptors return the interceptors that trace, with tp, the
// calls (but health checks) whose caller sent a sampled W3C trace context
// in metadata, continuing the caller's trace; nil, nil when tp is nil or a
// no-op provider. meridian's servers continue the traces that an API
// request (or a gRPC API client) started and never start their own, which
// keeps tracing at a low sampling ratio nearly free. They go first in a
// server's interceptor chains, so that the interceptors after them (the
// request log) see the call's span. The gRPC metrics stay lib/grpcserver's
// Prometheus ones (otelgrpc's meter is a no-op).
func GRPCServerInterceptors(tp trace.TracerProvider) (grpc.UnaryServerInterceptor, grpc.StreamServerInterceptor) {
	if !Recording(tp) {
		return nil, nil
	}
	t := serverTracer{h: otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(tp),
		otelgrpc.WithPropagators(Propagator()),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithFilter(filters.Not(filters.HealthCheck())),
	)}
	return t.unary, t.stream
}

// GRPCServerOptions returns GRPCServerInterceptors(tp) as server options,
// for a server that builds its own chains: none when tp is nil or a no-op
// provider. Given before the server's other interceptor options, the
// tracing interceptors run first.
func GRPCServerOptions(tp trace.TracerProvider) []grpc.ServerOption {
	u, s := GRPCServerInterceptors(tp)
	if u == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(u), grpc.ChainStreamInterceptor(s)}
}

// serverTracer drives the otelgrpc server handler h for the calls whose
// caller sent a sampled traceparent: h's TagRPC starts the server span
// (child of the caller's) and its End event ends it.
type serverTracer struct{ h stats.Handler }

// start returns ctx with the call's server span and true when the caller
// sent a sampled traceparent; ctx and false otherwise.
func (t serverTracer) start(ctx context.Context, method string) (context.Context, bool) {
	if v := metadata.ValueFromIncomingContext(ctx, "traceparent"); len(v) == 0 || !sampledTraceparent(v[0]) {
		return ctx, false
	}
	ctx = t.h.TagRPC(ctx, &stats.RPCTagInfo{FullMethodName: method})
	in := &stats.InHeader{FullMethod: method}
	if p, ok := peer.FromContext(ctx); ok {
		in.RemoteAddr, in.LocalAddr = p.Addr, p.LocalAddr
	}
	t.h.HandleRPC(ctx, in)
	return ctx, true
}

func (t serverTracer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	tctx, ok := t.start(ctx, info.FullMethod)
	if !ok {
		return handler(ctx, req)
	}
	begin := time.Now()
	resp, err := handler(tctx, req)
	t.h.HandleRPC(tctx, &stats.End{BeginTime: begin, EndTime: time.Now(), Error: err})
	return resp, err
}

func (t serverTracer) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	tctx, ok := t.start(ss.Context(), info.FullMethod)
	if !ok {
		return handler(srv, ss)
	}
	begin := time.Now()
	err := handler(srv, &tracedServerStream{ServerStream: ss, ctx: tctx})
	t.h.HandleRPC(tctx, &stats.End{BeginTime: begin, EndTime: time.Now(), Error: err})
	return err
}

// tracedServerStream is a server stream whose context holds its span.
type tracedServerStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *tracedServerStream) Context() context.Context { return s.ctx }

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

// GRPCClientOptions return the dial options with which an outgoing call
// made under a sampled span joins its trace: a client span child of the
// caller's, and the trace context sent in metadata. Other calls are
// passed straight on after one context lookup, so the options cost
// nothing measurable when tracing is off or the request was not sampled;
// they need no tracer provider (ContextTracerProvider).
func GRPCClientOptions() []grpc.DialOption {
	t := clientTracer{h: otelgrpc.NewClientHandler(
		otelgrpc.WithTracerProvider(ContextTracerProvider()),
		otelgrpc.WithPropagators(Propagator()),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithFilter(filters.Not(filters.HealthCheck())),
	)}
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(t.unary), grpc.WithChainStreamInterceptor(t.stream)}
}

// clientTracer drives the otelgrpc client handler h for the calls made
// under a sampled span: h's TagRPC starts the client span and puts the
// trace context in the outgoing metadata; its End event ends the span.
type clientTracer struct{ h stats.Handler }

func (t clientTracer) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if !Traced(ctx) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	ctx = t.h.TagRPC(ctx, &stats.RPCTagInfo{FullMethodName: method})
	begin := time.Now()
	var p peer.Peer
	err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Peer(&p))...)
	if p.Addr != nil {
		t.h.HandleRPC(ctx, &stats.OutHeader{Client: true, FullMethod: method, RemoteAddr: p.Addr})
	}
	t.h.HandleRPC(ctx, &stats.End{Client: true, BeginTime: begin, EndTime: time.Now(), Error: err})
	return err
}

func (t clientTracer) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	if !Traced(ctx) {
		return streamer(ctx, desc, cc, method, opts...)
	}
	ctx = t.h.TagRPC(ctx, &stats.RPCTagInfo{FullMethodName: method})
	cs := &tracedClientStream{h: t.h, ctx: ctx, begin: time.Now()}
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		cs.end(err)
		return nil, err
	}
	cs.ClientStream = s
	// A stream ends when a receive fails (io.EOF: it finished) or, for a
	// caller that stops receiving, when its context ends.
	cs.stop = context.AfterFunc(ctx, func() { cs.end(ctx.Err()) })
	return cs, nil
}

// tracedClientStream ends its client span once, when the stream ends.
type tracedClientStream struct {
	grpc.ClientStream
	h     stats.Handler
	ctx   context.Context
	begin time.Time
	stop  func() bool
	once  sync.Once
}

func (s *tracedClientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.stop() // set before the stream was returned to the caller
		if errors.Is(err, io.EOF) {
			s.end(nil)
		} else {
			s.end(err)
		}
	}
	return err
}

// end ends the span; the first call wins.
func (s *tracedClientStream) end(err error) {
	s.once.Do(func() {
		s.h.HandleRPC(s.ctx, &stats.End{Client: true, BeginTime: s.begin, EndTime: time.Now(), Error: err})
	})
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
