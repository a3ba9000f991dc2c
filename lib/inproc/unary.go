package inproc

import (
	"context"
	"crypto/x509"

	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/meridian-cp/meridian/lib/telemetry"
)

// Unary runs a unary method of a gRPC server of this process on req, on
// the caller's goroutine, without a connection: inside intercept (the
// server's interceptor chain, grpcserver.UnaryServerInterceptor), as a
// call over a connection dialed with DialOptions(cert) would run. The
// handler's context is ServerStream's: ctx's outgoing metadata as its
// incoming metadata, a peer whose AuthInfo holds cert (so the
// interceptors authorize the call as the holder of cert), and the
// caller's trace context when ctx is traced. The response is the
// handler's own message, not a copy: the caller must not change it.
// Headers and trailers the handler sets are dropped (a unary caller here
// has no way to read them).
func Unary[Req, Resp any](ctx context.Context, cert *x509.Certificate, info *grpc.UnaryServerInfo, intercept grpc.UnaryServerInterceptor, req *Req, handler func(context.Context, *Req) (*Resp, error)) (*Resp, error) {
	sctx := grpc.NewContextWithServerTransportStream(serverContext(ctx, cert, info.FullMethod), unaryTransport(info.FullMethod))
	resp, err := intercept(sctx, req, info, func(ctx context.Context, req any) (any, error) {
		return handler(ctx, req.(*Req))
	})
	if err != nil {
		return nil, err
	}
	r, _ := resp.(*Resp)
	return r, nil
}

// serverContext is the context a server's handler of method sees for a
// call from the holder of cert made with ctx (see ServerStream).
func serverContext(ctx context.Context, cert *x509.Certificate, method string) context.Context {
	// FromOutgoingContext returns a copy: the handler's incoming
	// metadata is its own, as a server's is.
	md, ok := metadata.FromOutgoingContext(ctx)
	if !ok {
		md = metadata.MD{}
	}
	if telemetry.Traced(ctx) {
		// What a gRPC client's tracing sends: the server's span joins
		// the caller's trace.
		c := propagation.MapCarrier{}
		telemetry.Propagator().Inject(ctx, c)
		for k, v := range c {
			md.Set(k, v)
		}
	}
	return peer.NewContext(metadata.NewIncomingContext(ctx, md), &peer.Peer{
		Addr: Addr("client-of-" + method), LocalAddr: Addr(method),
		AuthInfo: AuthInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}, Cert: cert},
	})
}

// unaryTransport is a unary call's grpc.ServerTransportStream: it names
// the method and drops headers and trailers.
type unaryTransport string

func (t unaryTransport) Method() string             { return string(t) }
func (unaryTransport) SetHeader(metadata.MD) error  { return nil }
func (unaryTransport) SendHeader(metadata.MD) error { return nil }
func (unaryTransport) SetTrailer(metadata.MD) error { return nil }
