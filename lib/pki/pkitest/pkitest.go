// Package pkitest issues throwaway certificates for tests: an in-memory CA
// and leaf certificates ready for a tls.Config, failing the test on any
// error instead of returning it.
package pkitest

import (
	"crypto/tls"
	"net"
	"testing"

	"github.com/meridian-cp/meridian/lib/pki"
)

// NewCA returns a new in-memory CA named commonName.
func NewCA(t testing.TB, commonName string) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA(commonName)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// Issue issues a certificate for spec from ca, in PEM form (for files and
// kubeconfigs).
func Issue(t testing.TB, ca *pki.CA, spec pki.CertSpec) pki.KeyPair {
	t.Helper()
	kp, err := ca.Issue(spec)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// IssueTLS issues a certificate for spec from ca, ready for a tls.Config.
func IssueTLS(t testing.TB, ca *pki.CA, spec pki.CertSpec) tls.Certificate {
	t.Helper()
	c, err := Issue(t, ca, spec).TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// LoopbackServer is the spec of a serving certificate named commonName for
// 127.0.0.1 and localhost, where tests listen.
func LoopbackServer(commonName string) pki.CertSpec {
	return pki.CertSpec{
		CommonName:  commonName,
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		Server:      true,
	}
}
