package app

import (
	"context"
	"net"

	"github.com/meridian-cp/meridian/lib/identity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

// trustLocalUnary moves the caller's identity from metadata into the
// context. It is installed only on the in-process server, which nothing
// outside this process can reach.
func trustLocalUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(withLocalUser(ctx), req)
}

func trustLocalStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, &userStream{ServerStream: ss, ctx: withLocalUser(ss.Context())})
}

func withLocalUser(ctx context.Context) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	if u, ok := identity.FromIncomingMetadata(md); ok {
		return identity.WithUser(ctx, u)
	}
	return ctx
}

type userStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *userStream) Context() context.Context { return s.ctx }

// insecureLocal are transport credentials for the in-process connection:
// no encryption (the bytes never leave the process), but a security level
// that lets gRPC send per-call credentials if any are ever added.
type insecureLocal struct{}

func (insecureLocal) ClientHandshake(_ context.Context, _ string, c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c, localAuth{}, nil
}
func (insecureLocal) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c, localAuth{}, nil
}
func (insecureLocal) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "local"}
}
func (insecureLocal) Clone() credentials.TransportCredentials { return insecureLocal{} }
func (insecureLocal) OverrideServerName(string) error         { return nil }

type localAuth struct{}

func (localAuth) AuthType() string { return "local" }
