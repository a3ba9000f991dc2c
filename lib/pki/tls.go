package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// ServerTLS returns a server configuration serving cert, verifying client
// certificates against clientCAs as auth says (tls.NoClientCert when
// clientCAs is nil is the caller's choice), with TLS 1.2 as the minimum and
// ALPN offering h2 and http/1.1.
func ServerTLS(cert tls.Certificate, clientCAs *x509.CertPool, auth tls.ClientAuthType) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientCAs:    clientCAs,
		ClientAuth:   auth,
		NextProtos:   []string{"h2", "http/1.1"},
	}
}

// ClientTLS returns a client configuration that verifies the server against
// roots under serverName and, when cert is not nil, presents cert.
// An empty serverName lets the dialer derive it from the target address.
func ClientTLS(cert *tls.Certificate, roots *x509.CertPool, serverName string) *tls.Config {
	c := &tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    roots,
		ServerName: serverName,
	}
	if cert != nil {
		c.Certificates = []tls.Certificate{*cert}
	}
	return c
}

// LoadServerTLS loads a server configuration from PEM files. With an empty
// clientCAFile clients are not asked for certificates; otherwise every
// client must present a certificate signed by a CA in that file
// (tls.RequireAndVerifyClientCert).
func LoadServerTLS(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("pki: load server key pair %s: %w", certFile, err)
	}
	if clientCAFile == "" {
		return ServerTLS(cert, nil, tls.NoClientCert), nil
	}
	pool, err := LoadPool(clientCAFile)
	if err != nil {
		return nil, err
	}
	return ServerTLS(cert, pool, tls.RequireAndVerifyClientCert), nil
}

// LoadClientTLS loads a client configuration from PEM files. certFile and
// keyFile are both empty (no client certificate) or both set; an empty
// caFile verifies the server against the system roots.
func LoadClientTLS(certFile, keyFile, caFile, serverName string) (*tls.Config, error) {
	var cert *tls.Certificate
	switch {
	case certFile != "" && keyFile != "":
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("pki: load client key pair %s: %w", certFile, err)
		}
		cert = &c
	case certFile != "" || keyFile != "":
		return nil, errors.New("pki: client certificate and key files must be set together")
	}
	var roots *x509.CertPool
	if caFile != "" {
		p, err := LoadPool(caFile)
		if err != nil {
			return nil, err
		}
		roots = p
	}
	return ClientTLS(cert, roots, serverName), nil
}

// LoadPool reads a PEM bundle of CA certificates into a new pool.
func LoadPool(caFile string) (*x509.CertPool, error) {
	data, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("pki: read CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%w: %s holds no certificate", ErrBadPEM, caFile)
	}
	return pool, nil
}
