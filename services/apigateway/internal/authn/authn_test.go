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

// audienceTokens is a TokenAuthenticator knowing one token, valid for the
// audience "api", and refusing one other.
type audienceTokens struct{}

func (audienceTokens) AuthenticateToken(token string, audiences []string) (identity.User, []string, bool, error) {
	switch token {
	case "refused":
		return identity.User{}, nil, false, errors.New("expired")
	case "known":
		if len(audiences) == 0 || audiences[0] == "api" {
			return identity.User{Name: "sa"}, []string{"api"}, true, nil
		}
		return identity.User{}, nil, false, errors.New("audience")
	}
	return identity.User{}, nil, false, nil
}

// TestTokenAuthenticators: a bearer token is tried with the token file,
// then each token authenticator, before (and instead of) the client
// certificate, so a certificate no CA here signed does not stop a valid
// token; a token file token is valid for the API's audiences only.
func TestTokenAuthenticators(t *testing.T) {
	tf, err := ParseTokenFile(strings.NewReader("static,alice,uid-1\n"))
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := pki.NewCA("test-ca")
	other, _ := pki.NewCA("other-ca")
	a := New(ca.Pool(), tf, WithTokenAuthenticator(audienceTokens{}), WithAPIAudiences([]string{"api"}))
	kp, err := other.Issue(pki.CertSpec{CommonName: "mallory", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := kp.TLSCertificate()
	leaf, _ := parseLeaf(cert)
	badCert := &tls.ConnectionState{PeerCertificates: leaf}
	if _, ok, err := a.Authenticate(Credentials{TLS: badCert}); ok || err == nil {
		t.Fatalf("foreign certificate alone: %v, %v; want refused", ok, err)
	}
	for token, want := range map[string]string{"known": "sa", "static": "alice"} {
		u, ok, err := a.Authenticate(Credentials{TLS: badCert, Authorization: "Bearer " + token})
		if !ok || err != nil || u.Name != want {
			t.Errorf("token %s with a foreign certificate: %+v, %v, %v; want %s", token, u, ok, err, want)
		}
	}
	if _, ok, err := a.Authenticate(Credentials{Authorization: "Bearer refused"}); ok || !errors.Is(err, ErrInvalidToken) {
		t.Errorf("refused token: %v, %v; want ErrInvalidToken", ok, err)
	}
	if _, aud, ok, err := a.AuthenticateToken("static", []string{"vault", "api"}); !ok || err != nil || fmt.Sprint(aud) != "[api]" {
		t.Errorf("static token for vault,api: %v, %v, %v; want [api]", aud, ok, err)
	}
	if _, _, ok, err := a.AuthenticateToken("static", []string{"vault"}); ok || !errors.Is(err, ErrInvalidToken) {
		t.Errorf("static token for vault: %v, %v; want refused", ok, err)
	}
}
