package authn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/meridian-cp/meridian/lib/pki"
)

func TestTokenFile(t *testing.T) {
	tf, err := ParseTokenFile(strings.NewReader("# comment\nsecret-1,alice,uid-1,\"dev,ops\"\nsecret-2,bob,uid-2\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := New(nil, tf)
	u, ok, err := a.Authenticate(Credentials{Authorization: "Bearer secret-1"})
	if err != nil || !ok || u.Name != "alice" || u.UID != "uid-1" || strings.Join(u.Groups, ",") != "dev,ops,system:authenticated" {
		t.Fatalf("alice: %+v %v %v", u, ok, err)
	}
	if _, ok, err := a.Authenticate(Credentials{Authorization: "Bearer nope"}); ok || !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("unknown token: ok=%v err=%v", ok, err)
	}
	if _, ok, err := a.Authenticate(Credentials{}); ok || err != nil {
		t.Fatalf("anonymous: ok=%v err=%v", ok, err)
	}
	for _, bad := range []string{"s3cr3t,user\n", "s3cr3t,user,uid\ns3cr3t,other,uid\n", ",user,uid\n"} {
		if _, err := ParseTokenFile(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseTokenFile(%q) accepted", bad)
		} else if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("error reveals the token: %v", err)
		}
	}
}

func TestClientCertificate(t *testing.T) {
	ca, err := pki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.NewCA("other-ca")
	if err != nil {
		t.Fatal(err)
	}
	a := New(ca.Pool(), nil)
	kp, err := ca.Issue(pki.CertSpec{CommonName: "admin", Organizations: []string{"system:masters"}, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := kp.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := parseLeaf(cert)
	if err != nil {
		t.Fatal(err)
	}
	u, ok, err := a.Authenticate(Credentials{TLS: &tls.ConnectionState{PeerCertificates: leaf}})
	if err != nil || !ok || u.Name != "admin" || u.Groups[0] != "system:masters" {
		t.Fatalf("admin: %+v %v %v", u, ok, err)
	}
	okp, _ := other.Issue(pki.CertSpec{CommonName: "mallory", Client: true})
	ocert, _ := okp.TLSCertificate()
	oleaf, _ := parseLeaf(ocert)
	if _, ok, err := a.Authenticate(Credentials{TLS: &tls.ConnectionState{PeerCertificates: oleaf}}); ok || err == nil {
		t.Fatalf("foreign CA accepted: ok=%v err=%v", ok, err)
	}
	skp, _ := ca.Issue(pki.CertSpec{CommonName: "server", Server: true, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}})
	scert, _ := skp.TLSCertificate()
	sleaf, _ := parseLeaf(scert)
	if _, ok, err := a.Authenticate(Credentials{TLS: &tls.ConnectionState{PeerCertificates: sleaf}}); ok || err == nil {
		t.Fatalf("server-only certificate accepted as a client: ok=%v err=%v", ok, err)
	}
}

func parseLeaf(c tls.Certificate) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for _, der := range c.Certificate {
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, err
		}
		out = append(out, cert)
	}
	return out, nil
}
