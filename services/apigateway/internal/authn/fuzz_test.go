package authn

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/pki"
)

// FuzzClientCertificate feeds the client certificate → user path random
// DER, as a leaf and an intermediate a client presents: it must never
// panic, and it accepts only a chain that verifies against the client CA
// for client authentication, naming the leaf's common name, with
// system:authenticated among the groups.
func FuzzClientCertificate(f *testing.F) {
	ca, err := pki.NewCA("fuzz-ca")
	if err != nil {
		f.Fatal(err)
	}
	other, err := pki.NewCA("other-ca")
	if err != nil {
		f.Fatal(err)
	}
	der := func(c *pki.CA, spec pki.CertSpec) []byte {
		kp, err := c.Issue(spec)
		if err != nil {
			f.Fatal(err)
		}
		block, _ := pem.Decode(kp.CertPEM)
		return block.Bytes
	}
	f.Add(der(ca, pki.CertSpec{CommonName: "admin", Organizations: []string{"system:masters"}, Client: true}), []byte(nil))
	f.Add(der(ca, pki.CertSpec{CommonName: "server", Server: true}), []byte(nil))
	f.Add(der(ca, pki.CertSpec{CommonName: "carol", Organizations: []string{"x", "y"}, Client: true}), ca.Cert.Raw)
	f.Add(der(other, pki.CertSpec{CommonName: "mallory", Client: true}), other.Cert.Raw)
	f.Add([]byte{0x30, 0x03, 0x02, 0x01, 0x00}, []byte{})
	roots := ca.Pool()
	a := New(roots, nil)
	f.Fuzz(func(t *testing.T, leafDER, interDER []byte) {
		leaf, err := x509.ParseCertificate(leafDER)
		if err != nil {
			return
		}
		chain := []*x509.Certificate{leaf}
		inter := x509.NewCertPool()
		if c, err := x509.ParseCertificate(interDER); err == nil {
			chain = append(chain, c)
			inter.AddCert(c)
		}
		u, ok, err := a.Authenticate(Credentials{TLS: &tls.ConnectionState{PeerCertificates: chain}})
		if !ok {
			if err == nil && leaf.Subject.CommonName != "" {
				if _, verr := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); verr == nil {
					t.Fatalf("a verified certificate of %q was not accepted", leaf.Subject.CommonName)
				}
			}
			return
		}
		if _, verr := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, CurrentTime: time.Now()}); verr != nil {
			t.Fatalf("accepted a certificate that does not verify: %v", verr)
		}
		if u.Name == "" || u.Name != leaf.Subject.CommonName || !slices.Contains(u.Groups, "system:authenticated") {
			t.Fatalf("user %+v from a certificate of %q", u, leaf.Subject.CommonName)
		}
	})
}

// FuzzParseTokenFile feeds ParseTokenFile random files: it must never
// panic; every token it accepts authenticates as its line's user (name
// set, system:authenticated among the groups); its errors never quote a
// token it read.
func FuzzParseTokenFile(f *testing.F) {
	for _, s := range []string{
		"secret-1,alice,uid-1,\"dev,ops\"\nsecret-2,bob,uid-2\n",
		"# comment\n\nt,u,1\n",
		"t,u\n",
		"t,u,1\nt,v,2\n",
		"\"a\"\"b\",c,d,\"e\"\n",
		",u,1\n",
		"t, ,1\n",
		"\"unterminated,u,1\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		tf, err := ParseTokenFile(strings.NewReader(data))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "authn: token file line ") {
				t.Fatalf("error %q does not name the line", err)
			}
			return
		}
		a := New(nil, tf)
		for token, want := range tf.users {
			if token == "" || want.Name == "" || !slices.Contains(want.Groups, "system:authenticated") {
				t.Fatalf("accepted token %q for user %+v", token, want)
			}
			if strings.TrimSpace(token) != token {
				continue // an Authorization header's value loses its spaces
			}
			u, ok, err := a.Authenticate(Credentials{Authorization: "Bearer " + token})
			if err != nil || !ok || u.Name != want.Name || u.UID != want.UID || !slices.Equal(u.Groups, want.Groups) {
				t.Fatalf("token %q: %+v %v %v, want %+v", token, u, ok, err, want)
			}
		}
	})
}
