package identity

import (
	"context"
	"crypto/x509"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/meridian-cp/meridian/lib/inproc"
)

// Organizations (O=) of the internal certificates, one per identity that
// calls meridian's services. Each service accepts the calls of the
// identities it serves and refuses the others (see Policy).
const (
	// GatewayOrganization is the Organization of the gateway's client
	// certificate: the peers trusted to assert users by default, and the
	// callers of the store's data RPCs, watchfanout, admission and flow
	// control.
	GatewayOrganization = "meridian:gateways"
	// WatchFanoutOrganization is the Organization of watchfanout's client
	// certificate: it reads and watches the store, and writes nothing.
	WatchFanoutOrganization = "meridian:watchfanout"
	// FlowControlOrganization is the Organization of the flow-control
	// service's client certificate: it reads and watches the store (its
	// FlowSchemas and PriorityLevelConfigurations), and writes nothing.
	FlowControlOrganization = "meridian:flowcontrol"
	// AdmissionOrganization is the Organization of the admission
	// service's client certificate: it reads and watches the store (its
	// admission policies and bindings, their param objects and the
	// namespaces), and writes nothing.
	AdmissionOrganization = "meridian:admission"
	// StorePeerOrganization is the Organization of a store member's
	// certificate: the raft transport, requests forwarded to the leader
	// and a new member asking to join.
	StorePeerOrganization = "meridian:store-peers"
	// OperatorOrganization is the Organization of an operator's client
	// certificate: the store's membership changes, compaction, snapshots
	// and status. It reads and writes no keys.
	OperatorOrganization = "meridian:operators"
)

// TrustFunc reports whether the mTLS client presenting peer (its verified
// leaf certificate) may assert users in request metadata. It is called on
// every request and must be safe for concurrent use.
type TrustFunc func(peer *x509.Certificate) bool

// TrustOrganization trusts peers whose certificate's Subject.Organization
// contains org.
func TrustOrganization(org string) TrustFunc {
	return func(peer *x509.Certificate) bool {
		return peer != nil && slices.Contains(peer.Subject.Organization, org)
	}
}

// VerifiedPeer returns the verified leaf certificate of the mTLS client of
// ctx's gRPC call: the first certificate of the first verified chain. It
// reports false for plaintext peers and for TLS peers that presented no
// certificate or one that was not verified. For an in-memory connection
// of this process (package inproc) it returns the certificate the dialing
// code gave the connection.
func VerifiedPeer(ctx context.Context) (*x509.Certificate, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return nil, false
	}
	if in, ok := p.AuthInfo.(inproc.AuthInfo); ok {
		// An in-memory connection of this process: the identity the
		// dialing code gave it stands for a verified certificate.
		return in.Cert, in.Cert != nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil, false
	}
	chains := info.State.VerifiedChains
	if len(chains) == 0 || len(chains[0]) == 0 {
		return nil, false
	}
	return chains[0][0], true
}

// fromCall returns ctx with the asserted user when the peer is trusted.
// Whatever a user value ctx already carries in process is dropped first, so
// the user a handler sees always comes from this decision.
func fromCall(ctx context.Context, trust TrustFunc) context.Context {
	if u, ok := assertedUser(ctx, trust); ok {
		return WithUser(ctx, u)
	}
	return context.WithValue(ctx, userKey{}, nil)
}

// assertedUser is the user asserted in the call's metadata, when the peer
// is trusted.
func assertedUser(ctx context.Context, trust TrustFunc) (User, bool) {
	if trust == nil {
		return User{}, false
	}
	cert, ok := VerifiedPeer(ctx)
	if !ok || !trust(cert) {
		return User{}, false
	}
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return User{}, false
	}
	return FromIncomingMetadata(md)
}

// UnaryServerInterceptor puts the user asserted in the request metadata
// into the handler's context (see UserFrom), but only when the peer's
// verified client certificate satisfies trust. From a plaintext peer, a peer
// without a verified certificate, or an untrusted peer, the metadata is
// ignored and the context carries no user. A nil trust trusts nobody.
func UnaryServerInterceptor(trust TrustFunc) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return handler(fromCall(ctx, trust), req)
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streaming calls.
func StreamServerInterceptor(trust TrustFunc) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return handler(srv, &contextStream{ServerStream: ss, ctx: fromCall(ss.Context(), trust)})
	}
}

// contextStream overrides the context of a server stream.
type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }
