package grpcclient_test

import (
	"crypto/tls"
	"net"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/meridian-cp/meridian/lib/grpcclient"
	"github.com/meridian-cp/meridian/lib/grpcserver"
	"github.com/meridian-cp/meridian/lib/pki"
)

func TestDialMTLS(t *testing.T) {
	ca, err := pki.NewCA("ca")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(spec pki.CertSpec) tls.Certificate {
		kp, err := ca.Issue(spec)
		if err != nil {
			t.Fatal(err)
		}
		c, err := kp.TLSCertificate()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	serverCert := issue(pki.CertSpec{CommonName: "svc", IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	clientCert := issue(pki.CertSpec{CommonName: "gw", Client: true})

	srv, _, err := grpcserver.New(grpcserver.Options{TLS: pki.ServerTLS(serverCert, ca.Pool(), tls.RequireAndVerifyClientCert)})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()

	conn, err := grpcclient.Dial(lis.Addr().String(), pki.ClientTLS(&clientCert, ca.Pool(), ""))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health over mTLS: %v", err)
	}

	// Without a client certificate the server refuses the connection.
	noCert, err := grpcclient.Dial(lis.Addr().String(), pki.ClientTLS(nil, ca.Pool(), ""))
	if err != nil {
		t.Fatal(err)
	}
	defer noCert.Close()
	if _, err := healthpb.NewHealthClient(noCert).Check(t.Context(), &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("call without a client certificate succeeded")
	}
}
