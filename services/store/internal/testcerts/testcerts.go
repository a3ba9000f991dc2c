// Package testcerts generates a throwaway CA and the certificates tests of
// the store's mutual TLS (gRPC API and raft transport) need: a member's,
// for 127.0.0.1/localhost, valid for server and client authentication with
// the store-peer identity, and a test client's, with both the gateway and
// the operator identities, so that one client may make data and operator
// calls.
package testcerts

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/pki"
)

// Set is a CA and the certificates signed by it.
type Set struct {
	// CAPEM, CertPEM and KeyPEM are the PEM encodings of the CA and of the
	// member's certificate and key.
	CAPEM, CertPEM, KeyPEM []byte
	ca                     *pki.CA
	member, client         tls.Certificate
}

// New generates a Set.
func New() (*Set, error) {
	ca, err := pki.NewCA("meridian-test-ca")
	if err != nil {
		return nil, err
	}
	member, err := ca.Issue(pki.CertSpec{
		CommonName: "store", Organizations: []string{identity.StorePeerOrganization},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}, Server: true, Client: true,
	})
	if err != nil {
		return nil, err
	}
	client, err := ca.Issue(pki.CertSpec{
		CommonName: "test-client", Organizations: []string{identity.GatewayOrganization, identity.OperatorOrganization}, Client: true,
	})
	if err != nil {
		return nil, err
	}
	s := &Set{CAPEM: ca.CertPEM(), CertPEM: member.CertPEM, KeyPEM: member.KeyPEM, ca: ca}
	if s.member, err = member.TLSCertificate(); err != nil {
		return nil, err
	}
	if s.client, err = client.TLSCertificate(); err != nil {
		return nil, err
	}
	return s, nil
}

// Server returns a member's server config requiring client certificates
// (mTLS).
func (s *Set) Server() *tls.Config {
	return pki.ServerTLS(s.member, s.ca.Pool(), tls.RequireAndVerifyClientCert)
}

// Peer returns a member's config for dialing other members (its
// Config.ClientTLS).
func (s *Set) Peer() *tls.Config {
	return pki.ClientTLS(&s.member, s.ca.Pool(), "")
}

// Client returns a test client's config: its certificate carries the
// gateway and the operator identities.
func (s *Set) Client() *tls.Config {
	return pki.ClientTLS(&s.client, s.ca.Pool(), "")
}

// Issue returns a client config presenting a new certificate with the
// given organizations, for tests of who may call what.
func (s *Set) Issue(commonName string, orgs ...string) (*tls.Config, error) {
	kp, err := s.ca.Issue(pki.CertSpec{CommonName: commonName, Organizations: orgs, Client: true})
	if err != nil {
		return nil, err
	}
	c, err := kp.TLSCertificate()
	if err != nil {
		return nil, err
	}
	return pki.ClientTLS(&c, s.ca.Pool(), ""), nil
}

// WriteFiles writes ca.pem and the member's cert.pem and key.pem into dir
// and returns their paths.
func (s *Set) WriteFiles(dir string) (ca, cert, key string, err error) {
	ca, cert, key = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for p, b := range map[string][]byte{ca: s.CAPEM, cert: s.CertPEM, key: s.KeyPEM} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return "", "", "", fmt.Errorf("testcerts: %w", err)
		}
	}
	return ca, cert, key, nil
}
