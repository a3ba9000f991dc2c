package identity_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"reflect"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meridian-cp/meridian/lib/grpcserver/grpcservertest"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/pki/pkitest"
)

func TestTrustOrganization(t *testing.T) {
	trust := identity.TrustOrganization(identity.GatewayOrganization)
	if trust(nil) {
		t.Error("nil certificate trusted")
	}
	if trust(&x509.Certificate{Subject: pkix.Name{Organization: []string{"other"}}}) {
		t.Error("other organization trusted")
	}
	if !trust(&x509.Certificate{Subject: pkix.Name{Organization: []string{"x", identity.GatewayOrganization}}}) {
		t.Error("gateway organization not trusted")
	}
}

// whoami answers with the name of the user in the handler's context, or
// "<none>".
func whoami(ctx context.Context) *wrapperspb.StringValue {
	u, ok := identity.UserFrom(ctx)
	if !ok {
		return wrapperspb.String("<none>")
	}
	return wrapperspb.String(u.Name)
}

// whoDesc is a service whose methods answer with the name of the user in
// the handler's context.
var whoDesc = grpcservertest.Desc("test.Who",
	func(ctx context.Context, _ *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return whoami(ctx), nil
	},
	func(ctx context.Context, _ *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		return whoami(ctx), nil
	})

type env struct {
	ca                 *pki.CA
	serverCert         tls.Certificate
	gatewayCert, other tls.Certificate
	trust              identity.TrustFunc
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ca := pkitest.NewCA(t, "test-ca")
	return &env{
		ca:          ca,
		serverCert:  pkitest.IssueTLS(t, ca, pkitest.LoopbackServer("svc")),
		gatewayCert: pkitest.IssueTLS(t, ca, pki.CertSpec{CommonName: "gateway", Organizations: []string{identity.GatewayOrganization}, Client: true}),
		other:       pkitest.IssueTLS(t, ca, pki.CertSpec{CommonName: "intruder", Organizations: []string{"meridian:others"}, Client: true}),
		trust:       identity.TrustOrganization(identity.GatewayOrganization),
	}
}

// serve starts a server with the identity interceptors on loopback.
func serve(t *testing.T, trust identity.TrustFunc, tlsConf *tls.Config) string {
	t.Helper()
	opts := []grpc.ServerOption{
		grpc.UnaryInterceptor(identity.UnaryServerInterceptor(trust)),
		grpc.StreamInterceptor(identity.StreamServerInterceptor(trust)),
	}
	if tlsConf != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConf)))
	}
	srv := grpc.NewServer(opts...)
	srv.RegisterService(whoDesc, nil)
	return grpcservertest.Serve(t, srv)
}

// who calls both methods as user alice (in system:masters) and returns what
// the server saw; both must agree.
func who(t *testing.T, addr string, creds credentials.TransportCredentials) string {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := identity.AppendToOutgoing(t.Context(), identity.User{
		Name: "alice", Groups: []string{"system:masters"},
		Extra: map[string][]string{"example.com/Team": {"platform"}},
	})
	unary, err := grpcservertest.CallUnary(ctx, conn, whoDesc, "")
	if err != nil {
		t.Fatalf("unary call: %v", err)
	}
	stream, err := grpcservertest.CallStream(ctx, conn, whoDesc, "")
	if err != nil {
		t.Fatalf("stream call: %v", err)
	}
	if stream != unary {
		t.Fatalf("unary saw %q, stream saw %q", unary, stream)
	}
	return unary
}

func TestInterceptorTrust(t *testing.T) {
	e := newEnv(t)
	mtls := pki.ServerTLS(e.serverCert, e.ca.Pool(), tls.RequireAndVerifyClientCert)
	optional := pki.ServerTLS(e.serverCert, e.ca.Pool(), tls.VerifyClientCertIfGiven)
	client := func(cert *tls.Certificate) credentials.TransportCredentials {
		return credentials.NewTLS(pki.ClientTLS(cert, e.ca.Pool(), "localhost"))
	}

	tests := []struct {
		name   string
		trust  identity.TrustFunc
		server *tls.Config
		creds  credentials.TransportCredentials
		want   string
	}{
		{"trusted gateway", e.trust, mtls, client(&e.gatewayCert), "alice"},
		{"untrusted client certificate", e.trust, mtls, client(&e.other), "<none>"},
		{"no client certificate", e.trust, optional, client(nil), "<none>"},
		{"plaintext", e.trust, nil, insecure.NewCredentials(), "<none>"},
		{"nil trust", nil, mtls, client(&e.gatewayCert), "<none>"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr := serve(t, tc.trust, tc.server)
			if got := who(t, addr, tc.creds); got != tc.want {
				t.Fatalf("server saw user %q, want %q", got, tc.want)
			}
		})
	}
}

func TestInterceptorCarriesWholeUser(t *testing.T) {
	e := newEnv(t)
	want := identity.User{
		Name: "jürgen", UID: "42", Groups: []string{"a", "b"},
		Extra: map[string][]string{"example.com/Team": {"x", "y"}},
	}
	var got identity.User
	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(pki.ServerTLS(e.serverCert, e.ca.Pool(), tls.RequireAndVerifyClientCert))),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return identity.UnaryServerInterceptor(e.trust)(ctx, req, info, func(ctx context.Context, req any) (any, error) {
				got, _ = identity.UserFrom(ctx)
				return h(ctx, req)
			})
		}),
	)
	srv.RegisterService(whoDesc, nil)
	conn, err := grpc.NewClient(grpcservertest.Serve(t, srv), grpc.WithTransportCredentials(
		credentials.NewTLS(pki.ClientTLS(&e.gatewayCert, e.ca.Pool(), "localhost"))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := identity.AppendToOutgoing(t.Context(), want)
	if _, err := grpcservertest.CallUnary(ctx, conn, whoDesc, ""); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("server saw %+v, want %+v", got, want)
	}
}
