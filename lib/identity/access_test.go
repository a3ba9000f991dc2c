package identity_test

import (
	"crypto/tls"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/meridian-cp/meridian/lib/grpcserver/grpcservertest"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/pki/pkitest"
)

// serveWithPolicy starts a TLS server (client certificates verified when
// given) with the policy's interceptors, test.Who and the health service.
func serveWithPolicy(t *testing.T, e *env, p identity.Policy) string {
	t.Helper()
	srv := grpc.NewServer(
		grpc.Creds(credentials.NewTLS(pki.ServerTLS(e.serverCert, e.ca.Pool(), tls.VerifyClientCertIfGiven))),
		grpc.UnaryInterceptor(p.UnaryServerInterceptor()),
		grpc.StreamInterceptor(p.StreamServerInterceptor()),
	)
	srv.RegisterService(whoDesc, nil)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	return grpcservertest.Serve(t, srv)
}

// callBoth calls test.Who's unary and streaming methods and returns their
// errors.
func callBoth(t *testing.T, addr string, cert *tls.Certificate, e *env) (unary, stream error) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(pki.ClientTLS(cert, e.ca.Pool(), "localhost"))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, unary = grpcservertest.CallUnary(t.Context(), conn, whoDesc, "")
	_, stream = grpcservertest.CallStream(t.Context(), conn, whoDesc, "")
	return unary, stream
}

func wantCode(t *testing.T, what string, err error, code codes.Code, msg ...string) {
	t.Helper()
	if status.Code(err) != code {
		t.Fatalf("%s: %v, want code %s", what, err, code)
	}
	for _, m := range msg {
		if !strings.Contains(status.Convert(err).Message(), m) {
			t.Fatalf("%s: message %q does not say %q", what, status.Convert(err).Message(), m)
		}
	}
}

func TestPolicyAuthorizesByOrganization(t *testing.T) {
	e := newEnv(t)
	operator := pkitest.IssueTLS(t, e.ca, pki.CertSpec{CommonName: "op", Organizations: []string{identity.OperatorOrganization}, Client: true})
	both := pkitest.IssueTLS(t, e.ca, pki.CertSpec{CommonName: "both", Organizations: []string{"x", identity.OperatorOrganization, identity.GatewayOrganization}, Client: true})
	addr := serveWithPolicy(t, e, identity.Policy{
		"/test.Who/Unary":            {identity.GatewayOrganization},
		identity.Service("test.Who"): {identity.OperatorOrganization},
	})

	// The method's own key wins over its service's.
	u, s := callBoth(t, addr, &e.gatewayCert, e)
	if u != nil {
		t.Fatalf("gateway, unary: %v", u)
	}
	wantCode(t, "gateway, stream", s, codes.PermissionDenied, "/test.Who/Stream", identity.OperatorOrganization, `CN="gateway"`, identity.GatewayOrganization)
	u, s = callBoth(t, addr, &operator, e)
	wantCode(t, "operator, unary", u, codes.PermissionDenied, "/test.Who/Unary", identity.GatewayOrganization)
	if s != nil {
		t.Fatalf("operator, stream: %v", s)
	}
	if u, s = callBoth(t, addr, &both, e); u != nil || s != nil {
		t.Fatalf("certificate with both organizations: %v, %v", u, s)
	}
	u, s = callBoth(t, addr, &e.other, e)
	wantCode(t, "other, unary", u, codes.PermissionDenied)
	wantCode(t, "other, stream", s, codes.PermissionDenied)
	u, s = callBoth(t, addr, nil, e)
	wantCode(t, "no certificate, unary", u, codes.Unauthenticated)
	wantCode(t, "no certificate, stream", s, codes.Unauthenticated)
}

func TestPolicyRefusesUnlistedMethodsAndOpensHealth(t *testing.T) {
	e := newEnv(t)
	addr := serveWithPolicy(t, e, identity.Policy{"/test.Who/Unary": {identity.GatewayOrganization}})
	_, s := callBoth(t, addr, &e.gatewayCert, e)
	wantCode(t, "unlisted method", s, codes.PermissionDenied, "open to no caller")

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(pki.ClientTLS(nil, e.ca.Pool(), "localhost"))))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health check without a certificate: %v", err)
	}
}

func TestPolicyValidate(t *testing.T) {
	good := identity.Policy{"/a.B/C": {"o"}, identity.Service("a.B"): {"o", "p"}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []identity.Policy{
		{"a.B/C": {"o"}},
		{"/a.B": {"o"}},
		{"/a.B/C/D": {"o"}},
		{"/a.B/C*": {"o"}},
		{"//C": {"o"}},
		{"/a.B/C": nil},
		{"/a.B/C": {""}},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestRequireOrganization(t *testing.T) {
	e := newEnv(t)
	peerServer := pkitest.IssueTLS(t, e.ca, pki.CertSpec{CommonName: "peer", Organizations: []string{identity.StorePeerOrganization},
		DNSNames: []string{"localhost"}, Server: true, Client: true})
	peer := pkitest.IssueTLS(t, e.ca, pki.CertSpec{CommonName: "peer-1", Organizations: []string{identity.StorePeerOrganization}, Client: true})
	serverConf := identity.RequireOrganization(pki.ServerTLS(peerServer, e.ca.Pool(), tls.RequireAndVerifyClientCert), identity.StorePeerOrganization)
	lis, err := tls.Listen("tcp", "127.0.0.1:0", serverConf)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	handshakes := make(chan error)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			handshakes <- c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	dial := func(cert tls.Certificate, conf func(*tls.Config) *tls.Config) (serverErr, clientErr error) {
		c, err := tls.Dial("tcp", lis.Addr().String(), conf(pki.ClientTLS(&cert, e.ca.Pool(), "localhost")))
		serverErr = <-handshakes
		if err == nil {
			c.Close()
		}
		return serverErr, err
	}
	same := func(c *tls.Config) *tls.Config { return c }
	if s, c := dial(peer, same); s != nil || c != nil {
		t.Fatalf("store peer refused: server %v, client %v", s, c)
	}
	if s, _ := dial(e.gatewayCert, same); s == nil || !strings.Contains(s.Error(), identity.StorePeerOrganization) {
		t.Fatalf("gateway certificate accepted by the server: %v", s)
	}
	// The dialling side checks the server's certificate the same way.
	wantGateway := func(c *tls.Config) *tls.Config { return identity.RequireOrganization(c, identity.GatewayOrganization) }
	if _, c := dial(peer, wantGateway); c == nil || !strings.Contains(c.Error(), identity.GatewayOrganization) {
		t.Fatalf("client accepted a server without the organization it requires: %v", c)
	}
}

// TestPolicyAuthorize: Authorize answers as the interceptors do.
func TestPolicyAuthorize(t *testing.T) {
	e := newEnv(t)
	p := identity.Policy{"/test.Who/Unary": {identity.GatewayOrganization}}
	if err := p.Authorize(e.gatewayCert.Leaf, "/test.Who/Unary"); err != nil {
		t.Fatalf("gateway: %v", err)
	}
	wantCode(t, "other organization", p.Authorize(e.other.Leaf, "/test.Who/Unary"), codes.PermissionDenied, `CN="intruder"`)
	wantCode(t, "unlisted method", p.Authorize(e.gatewayCert.Leaf, "/test.Who/Stream"), codes.PermissionDenied, "open to no caller")
	wantCode(t, "no certificate", p.Authorize(nil, "/test.Who/Unary"), codes.Unauthenticated)
	if err := p.Authorize(nil, "/grpc.health.v1.Health/Check"); err != nil {
		t.Fatalf("health without a certificate: %v", err)
	}
}
