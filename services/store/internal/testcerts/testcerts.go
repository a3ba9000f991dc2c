// Package testcerts generates a throwaway CA and a certificate for
// 127.0.0.1/localhost, valid for both server and client authentication, for
// tests of the store's mutual TLS (gRPC API and raft transport).
package testcerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Set is a CA and one leaf certificate signed by it.
type Set struct {
	// CAPEM, CertPEM and KeyPEM are the PEM encodings.
	CAPEM, CertPEM, KeyPEM []byte
	pool                   *x509.CertPool
	cert                   tls.Certificate
}

// New generates a Set.
func New() (*Set, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "meridian-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "store"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	s := &Set{
		CAPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		pool:    x509.NewCertPool(),
	}
	s.pool.AddCert(ca)
	if s.cert, err = tls.X509KeyPair(s.CertPEM, s.KeyPEM); err != nil {
		return nil, err
	}
	return s, nil
}

// Server returns a server config requiring client certificates (mTLS).
func (s *Set) Server() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{s.cert}, ClientCAs: s.pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
}

// Client returns a client config presenting the certificate.
func (s *Set) Client() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{s.cert}, RootCAs: s.pool, MinVersion: tls.VersionTLS12}
}

// WriteFiles writes ca.pem, cert.pem and key.pem into dir and returns their
// paths.
func (s *Set) WriteFiles(dir string) (ca, cert, key string, err error) {
	ca, cert, key = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for p, b := range map[string][]byte{ca: s.CAPEM, cert: s.CertPEM, key: s.KeyPEM} {
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return "", "", "", fmt.Errorf("testcerts: %w", err)
		}
	}
	return ca, cert, key, nil
}
