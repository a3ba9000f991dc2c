package grpcclient_test

import (
	"crypto/tls"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/meridian-cp/meridian/lib/grpcclient"
	"github.com/meridian-cp/meridian/lib/grpcserver"
	"github.com/meridian-cp/meridian/lib/grpcserver/grpcservertest"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/pki/pkitest"
)

func TestDialMTLS(t *testing.T) {
	ca := pkitest.NewCA(t, "ca")
	serverCert := pkitest.IssueTLS(t, ca, pkitest.LoopbackServer("svc"))
	clientCert := pkitest.IssueTLS(t, ca, pki.CertSpec{CommonName: "gw", Client: true})

	srv, _, err := grpcserver.New(grpcserver.Options{TLS: pki.ServerTLS(serverCert, ca.Pool(), tls.RequireAndVerifyClientCert)})
	if err != nil {
		t.Fatal(err)
	}
	addr := grpcservertest.Serve(t, srv)

	conn, err := grpcclient.Dial(addr, pki.ClientTLS(&clientCert, ca.Pool(), ""))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health over mTLS: %v", err)
	}

	// Without a client certificate the server refuses the connection.
	noCert, err := grpcclient.Dial(addr, pki.ClientTLS(nil, ca.Pool(), ""))
	if err != nil {
		t.Fatal(err)
	}
	defer noCert.Close()
	if _, err := healthpb.NewHealthClient(noCert).Check(t.Context(), &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("call without a client certificate succeeded")
	}
}
