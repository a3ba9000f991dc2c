package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
)

// ServerTLS returns a server configuration serving cert, verifying client
// certificates against clientCAs as auth says (tls.NoClientCert when
// clientCAs is nil is the caller's choice), with TLS 1.2 as the minimum and
// ALPN offering h2 and http/1.1.
func ServerTLS(cert tls.Certificate, clientCAs *x509.CertPool, auth tls.ClientAuthType) *tls.Config {
	c := serverTLS(clientCAs, auth)
	c.Certificates = []tls.Certificate{cert}
	return c
}

// serverTLS is ServerTLS without a certificate.
func serverTLS(clientCAs *x509.CertPool, auth tls.ClientAuthType) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		ClientCAs:  clientCAs,
		ClientAuth: auth,
		NextProtos: []string{"h2", "http/1.1"},
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

// ReloadingServerTLS is ServerTLS serving the pair r holds now, so that
// the server picks up a rotated certificate on its next handshake (see
// KeyPairReloader).
func ReloadingServerTLS(r *KeyPairReloader, clientCAs *x509.CertPool, auth tls.ClientAuthType) *tls.Config {
	c := serverTLS(clientCAs, auth)
	c.GetCertificate = r.GetCertificate
	return c
}

// ReloadingClientTLS is ClientTLS presenting the pair r holds now, so that
// the client presents a rotated certificate on its next handshake (see
// KeyPairReloader).
func ReloadingClientTLS(r *KeyPairReloader, roots *x509.CertPool, serverName string) *tls.Config {
	c := ClientTLS(nil, roots, serverName)
	c.GetClientCertificate = r.GetClientCertificate
	return c
}

// LoadServerTLS loads a server configuration from PEM files. The
// certificate and key are read again when they change (see
// KeyPairReloader; log logs those reloads, nil means slog.Default()). With
// an empty clientCAFile clients are not asked for certificates; otherwise
// every client must present a certificate signed by a CA in that file
// (tls.RequireAndVerifyClientCert).
func LoadServerTLS(certFile, keyFile, clientCAFile string, log *slog.Logger) (*tls.Config, error) {
	r, err := NewKeyPairReloader(certFile, keyFile, ReloadOptions{Logger: log})
	if err != nil {
		return nil, err
	}
	if clientCAFile == "" {
		return ReloadingServerTLS(r, nil, tls.NoClientCert), nil
	}
	pool, err := LoadPool(clientCAFile)
	if err != nil {
		return nil, err
	}
	return ReloadingServerTLS(r, pool, tls.RequireAndVerifyClientCert), nil
}

// LoadClientTLS loads a client configuration from PEM files. certFile and
// keyFile are both empty (no client certificate) or both set; the pair is
// read again when it changes (see KeyPairReloader; log logs those reloads,
// nil means slog.Default()). An empty caFile verifies the server against
// the system roots.
func LoadClientTLS(certFile, keyFile, caFile, serverName string, log *slog.Logger) (*tls.Config, error) {
	var r *KeyPairReloader
	switch {
	case certFile != "" && keyFile != "":
		var err error
		if r, err = NewKeyPairReloader(certFile, keyFile, ReloadOptions{Logger: log}); err != nil {
			return nil, err
		}
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
	if r == nil {
		return ClientTLS(nil, roots, serverName), nil
	}
	return ReloadingClientTLS(r, roots, serverName), nil
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
