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

// UnaryMethod is a unary method of a gRPC server of this process as the
// holder of one certificate calls it (Call): its handler inside the
// server's interceptor chain, and what every call's handler sees of its
// caller (a peer whose AuthInfo holds the certificate, the transport
// stream naming the method), all built once rather than per call. It is
// safe for concurrent use.
type UnaryMethod[Req, Resp any] struct {
	handler   grpc.UnaryHandler
	peer      *peer.Peer
	transport grpc.ServerTransportStream
}

// NewUnaryMethod returns the method info.FullMethod whose handler is
// handler, as called over a connection dialed with DialOptions(cert):
// bind binds handler into the server's interceptor chain
// (grpcserver.UnaryServerChain).
func NewUnaryMethod[Req, Resp any](cert *x509.Certificate, info *grpc.UnaryServerInfo, bind func(*grpc.UnaryServerInfo, grpc.UnaryHandler) grpc.UnaryHandler, handler func(context.Context, *Req) (*Resp, error)) *UnaryMethod[Req, Resp] {
	return &UnaryMethod[Req, Resp]{
		handler: bind(info, func(ctx context.Context, req any) (any, error) {
			return handler(ctx, req.(*Req))
		}),
		peer:      newPeer(cert, info.FullMethod),
		transport: unaryTransport(info.FullMethod),
	}
}

// Call runs the method on req on the caller's goroutine, without a
// connection: inside the server's interceptors, as a call over a
// connection dialed with DialOptions(cert) would run, cert being m's.
// The handler's context is ServerStream's: ctx's outgoing metadata as
// its incoming metadata, a peer whose AuthInfo holds cert (so the
// interceptors authorize the call as the holder of cert), and the
// caller's trace context when ctx is traced. The response is the
// handler's own message, not a copy: the caller must not change it.
// Headers and trailers the handler sets are dropped (a unary caller here
// has no way to read them).
func (m *UnaryMethod[Req, Resp]) Call(ctx context.Context, req *Req) (*Resp, error) {
	resp, err := m.handler(grpc.NewContextWithServerTransportStream(serverContext(ctx, m.peer), m.transport), req)
	if err != nil {
		return nil, err
	}
	r, _ := resp.(*Resp)
	return r, nil
}

// newPeer is the peer a server's handler of method sees for a call from
// the holder of cert.
func newPeer(cert *x509.Certificate, method string) *peer.Peer {
	return &peer.Peer{
		Addr: Addr("client-of-" + method), LocalAddr: Addr(method),
		AuthInfo: AuthInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}, Cert: cert},
	}
}

// serverContext is the context a server's handler sees for a call made
// with ctx by the peer p (see ServerStream).
func serverContext(ctx context.Context, p *peer.Peer) context.Context {
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
	return peer.NewContext(metadata.NewIncomingContext(ctx, md), p)
}

// unaryTransport is a unary call's grpc.ServerTransportStream: it names
// the method and drops headers and trailers.
type unaryTransport string

func (t unaryTransport) Method() string             { return string(t) }
func (unaryTransport) SetHeader(metadata.MD) error  { return nil }
func (unaryTransport) SendHeader(metadata.MD) error { return nil }
func (unaryTransport) SetTrailer(metadata.MD) error { return nil }
