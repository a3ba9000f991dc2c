// Package webhooktest serves webhooks over HTTPS for tests: a server with
// a certificate of its own CA (the caBundle a test puts in a
// WebhookClientConfig), valid for 127.0.0.1 and the DNS names the test
// asks for.
package webhooktest

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/meridian-cp/meridian/lib/pki"
)

// Server is a running HTTPS webhook server.
type Server struct {
	// URL is https://127.0.0.1:<port>.
	URL string
	// Addr is the server's host:port.
	Addr string
	// CABundle is the PEM of the CA that issued the server's certificate.
	CABundle []byte
}

// Start serves h over HTTPS until the test ends. The certificate is valid
// for 127.0.0.1 and dnsNames.
func Start(t testing.TB, h http.Handler, dnsNames ...string) *Server {
	t.Helper()
	ca, err := pki.NewCA("webhooktest CA")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.Issue(pki.CertSpec{CommonName: "webhooktest", DNSNames: dnsNames, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := kp.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return &Server{URL: srv.URL, Addr: srv.Listener.Addr().String(), CABundle: ca.CertPEM()}
}
