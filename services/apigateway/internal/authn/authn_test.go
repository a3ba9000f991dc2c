package authn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/identity"
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

// TestClientCertificateVerdictLapses: a certificate's verdict is
// remembered until its chain expires, then the certificate is refused; the
// remembered user's groups are not shared with callers.
func TestClientCertificateVerdictLapses(t *testing.T) {
	ca, err := pki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	a := New(ca.Pool(), nil)
	kp, err := ca.Issue(pki.CertSpec{CommonName: "alice", Organizations: []string{"dev"}, Client: true, Validity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := kp.TLSCertificate()
	chain, err := parseLeaf(cert)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	u, ok, err := a.certUser(chain, now)
	if err != nil || !ok || u.Name != "alice" {
		t.Fatalf("first request: %+v %v %v", u, ok, err)
	}
	u.Groups[0] = "system:masters"
	u, ok, err = a.certUser(chain, now.Add(time.Minute))
	if err != nil || !ok || u.Groups[0] != "dev" {
		t.Fatalf("remembered verdict: %+v %v %v", u, ok, err)
	}
	if _, ok, err := a.certUser(chain, now.Add(2*time.Hour)); ok || err == nil {
		t.Fatalf("expired certificate accepted: ok=%v err=%v", ok, err)
	}
}

func TestVerifiedCertsBounded(t *testing.T) {
	v := newVerifiedCerts()
	until := time.Now().Add(time.Hour)
	for i := range maxVerifiedCerts + 10 {
		v.put([]byte(fmt.Sprint(i)), identity.User{Name: "u"}, until)
	}
	if n := len(v.m); n != maxVerifiedCerts {
		t.Fatalf("%d certificates kept, want %d", n, maxVerifiedCerts)
	}
	if _, ok := v.get([]byte(fmt.Sprint(maxVerifiedCerts+9)), time.Now()); !ok {
		t.Fatal("the newest certificate was dropped")
	}
}
