package main

import (
	"crypto/tls"
	"net"
	"path/filepath"
	"testing"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/pki"
)

// testPKI is the part of the all-in-one's pki/ directory the store and
// its CLI use, with the all-in-one's file names and certificate specs
// (internal/allinone/pki.go): the internal CA, a member certificate for
// loopback and an operator's client certificate.
type testPKI struct {
	dir                    string
	ca, member, memberKey  string
	operator, operatorKey  string
	internalCA             *pki.CA
	memberPair, clientPair tls.Certificate
}

// writeTestPKI writes the internal CA's certificate, store.crt/.key and
// operator.crt/.key into dir.
func writeTestPKI(t *testing.T, dir string) *testPKI {
	t.Helper()
	ca, err := pki.NewCA("meridian-internal-ca")
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{
		dir: dir, internalCA: ca,
		ca:     filepath.Join(dir, "internal-ca.crt"),
		member: filepath.Join(dir, "store.crt"), memberKey: filepath.Join(dir, "store.key"),
		operator: filepath.Join(dir, "operator.crt"), operatorKey: filepath.Join(dir, "operator.key"),
	}
	member, err := ca.LoadOrIssue(dir, "store", pki.CertSpec{
		CommonName: "meridian-store", Organizations: []string{identity.StorePeerOrganization},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		Server: true, Client: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	operator, err := ca.LoadOrIssue(dir, "operator", pki.CertSpec{
		CommonName: "meridian-operator", Organizations: []string{identity.OperatorOrganization}, Client: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.WriteCert(p.ca); err != nil {
		t.Fatal(err)
	}
	if p.memberPair, err = member.TLSCertificate(); err != nil {
		t.Fatal(err)
	}
	if p.clientPair, err = operator.TLSCertificate(); err != nil {
		t.Fatal(err)
	}
	return p
}

// serverTLS is a member's gRPC server configuration (mTLS).
func (p *testPKI) serverTLS() *tls.Config {
	return pki.ServerTLS(p.memberPair, p.internalCA.Pool(), tls.RequireAndVerifyClientCert)
}

// operatorTLS is the operator's client configuration.
func (p *testPKI) operatorTLS() *tls.Config {
	return pki.ClientTLS(&p.clientPair, p.internalCA.Pool(), "")
}
