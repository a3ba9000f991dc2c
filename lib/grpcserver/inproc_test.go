package grpcserver_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meridian-cp/meridian/lib/grpcserver"
	"github.com/meridian-cp/meridian/lib/grpcserver/grpcservertest"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/inproc"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/pki/pkitest"
)

// TestInprocIdentity: one mTLS server served on TCP and on an in-memory
// listener authorizes in-memory callers by the certificate their dialer
// gave the connection, exactly as it does TLS callers by the certificate
// they present, and trusts only the trusted identity to assert users.
func TestInprocIdentity(t *testing.T) {
	ca := pkitest.NewCA(t, "test-ca")
	serving := pkitest.IssueTLS(t, ca, pkitest.LoopbackServer("svc"))
	gateway := pkitest.IssueTLS(t, ca, pki.CertSpec{CommonName: "gw", Organizations: []string{identity.GatewayOrganization}, Client: true})
	operator := pkitest.IssueTLS(t, ca, pki.CertSpec{CommonName: "op", Organizations: []string{identity.OperatorOrganization}, Client: true})
	// The handler answers with the user the call asserts, as the server
	// decided to trust it.
	whoami := grpcservertest.Desc("test.Who",
		func(ctx context.Context, _ *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			u, _ := identity.UserFrom(ctx)
			return wrapperspb.String(u.Name), nil
		},
		func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) { return in, nil })
	srv, _, err := grpcserver.New(grpcserver.Options{
		TLS:    pki.ServerTLS(serving, ca.Pool(), tls.RequireAndVerifyClientCert),
		Access: identity.Policy{identity.Service("test.Who"): {identity.GatewayOrganization}},
		Trust:  identity.TrustOrganization(identity.GatewayOrganization),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.RegisterService(whoami, nil)
	tcpAddr := grpcservertest.Serve(t, srv)
	var ls inproc.Listeners
	lis, err := ls.Listen("svc")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	if _, err := ls.Listen("svc"); err == nil {
		t.Fatal("a second listener named svc was made")
	}

	call := func(cert *x509.Certificate, target string) (string, error) {
		t.Helper()
		conn, err := grpc.NewClient(target, ls.DialOptions(cert)...)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx := identity.AppendToOutgoing(t.Context(), identity.User{Name: "alice"})
		return grpcservertest.CallUnary(ctx, conn, whoami, "")
	}
	if got, err := call(gateway.Leaf, inproc.Target("svc")); err != nil || got != "alice" {
		t.Fatalf("in memory as the gateway: %q, %v; want alice", got, err)
	}
	if _, err := call(operator.Leaf, inproc.Target("svc")); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("in memory as the operator: %v, want PermissionDenied", err)
	}
	if _, err := call(nil, inproc.Target("svc")); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("in memory without an identity: %v, want Unauthenticated", err)
	}
	if _, err := call(gateway.Leaf, inproc.Target("nobody")); status.Code(err) != codes.Unavailable {
		t.Fatalf("in memory to no listener: %v, want Unavailable", err)
	}

	// TCP still needs the TLS handshake: neither plaintext nor the
	// in-memory credentials get through.
	for name, creds := range map[string]credentials.TransportCredentials{"plaintext": insecure.NewCredentials()} {
		conn, err := grpc.NewClient(tcpAddr, grpc.WithTransportCredentials(creds))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := grpcservertest.CallUnary(t.Context(), conn, whoami, ""); status.Code(err) != codes.Unavailable {
			t.Errorf("TCP %s: %v, want Unavailable", name, err)
		}
		conn.Close()
	}
	conn, err := grpc.NewClient(tcpAddr, append(ls.DialOptions(gateway.Leaf), grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	}))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := grpcservertest.CallUnary(t.Context(), conn, whoami, ""); status.Code(err) != codes.Unavailable {
		t.Errorf("TCP with the in-memory credentials: %v, want Unavailable", err)
	}
	// Over mTLS the same certificate gets the same answer.
	tlsConn, err := grpc.NewClient(tcpAddr, grpc.WithTransportCredentials(credentials.NewTLS(pki.ClientTLS(&gateway, ca.Pool(), ""))))
	if err != nil {
		t.Fatal(err)
	}
	defer tlsConn.Close()
	ctx := identity.AppendToOutgoing(t.Context(), identity.User{Name: "alice"})
	if got, err := grpcservertest.CallUnary(ctx, tlsConn, whoami, ""); err != nil || got != "alice" {
		t.Fatalf("mTLS as the gateway: %q, %v; want alice", got, err)
	}
}

// TestUnaryServerChainInProcess: a handler bound into a server's unary
// chain (UnaryServerChain) and called in process (inproc.UnaryMethod) is
// authorized by the caller's certificate, trusts only the trusted
// identity to assert users, is counted in the server's metrics, and
// turns a panic into Internal, as a call over a connection would be;
// every call goes through the chain bound once.
func TestUnaryServerChainInProcess(t *testing.T) {
	ca := pkitest.NewCA(t, "test-ca")
	gateway := pkitest.IssueTLS(t, ca, pki.CertSpec{CommonName: "gw", Organizations: []string{identity.GatewayOrganization}, Client: true})
	operator := pkitest.IssueTLS(t, ca, pki.CertSpec{CommonName: "op", Organizations: []string{identity.OperatorOrganization}, Client: true})
	reg := prometheus.NewRegistry()
	bind, err := grpcserver.UnaryServerChain(grpcserver.Options{
		TLS:        pki.ServerTLS(pkitest.IssueTLS(t, ca, pkitest.LoopbackServer("svc")), ca.Pool(), tls.RequireAndVerifyClientCert),
		Access:     identity.Policy{identity.Service("test.Boom"): {identity.GatewayOrganization}},
		Trust:      identity.TrustOrganization(identity.GatewayOrganization),
		Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	whoami := func(ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if in.Value == "panic" {
			panic("boom")
		}
		u, _ := identity.UserFrom(ctx)
		return wrapperspb.String(u.Name), nil
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/test.Boom/Unary"}
	asGateway := inproc.NewUnaryMethod(gateway.Leaf, info, bind, whoami)
	asOperator := inproc.NewUnaryMethod(operator.Leaf, info, bind, whoami)
	ctx := identity.AppendToOutgoing(t.Context(), identity.User{Name: "alice"})
	for range 2 {
		if got, err := asGateway.Call(ctx, wrapperspb.String("")); err != nil || got.GetValue() != "alice" {
			t.Fatalf("as the gateway: %v, %v; want alice", got, err)
		}
	}
	if _, err := asOperator.Call(ctx, wrapperspb.String("")); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("as the operator: %v, want PermissionDenied", err)
	}
	if _, err := asGateway.Call(ctx, wrapperspb.String("panic")); status.Code(err) != codes.Internal {
		t.Fatalf("a panicking handler: %v, want Internal", err)
	}
	for code, want := range map[string]float64{"OK": 2, "PermissionDenied": 1, "Internal": 1} {
		if got := handledTotal(t, reg, "Unary", code); got != want {
			t.Errorf("handled{Unary,%s} = %v, want %v", code, got, want)
		}
	}
}
