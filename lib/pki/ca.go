// Package pki issues the certificates meridian's services use for mTLS: a
// certificate authority, serving certificates and client certificates, kept
// as PEM files in a directory so that the all-in-one binary and tests can
// create them once and reuse them across restarts.
//
// Keys are ECDSA P-256. Key files are written with mode 0600 and never
// logged.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// CAValidity is how long a created CA is valid.
const CAValidity = 10 * 365 * 24 * time.Hour

// Errors returned by this package; match with errors.Is.
var (
	// ErrInvalidSpec reports a CertSpec that cannot be issued.
	ErrInvalidSpec = errors.New("pki: invalid certificate spec")
	// ErrBadPEM reports a file that holds no usable PEM block.
	ErrBadPEM = errors.New("pki: no usable PEM data")
)

// CA is a certificate authority: its certificate and signing key.
type CA struct {
	// Cert is the CA certificate.
	Cert *x509.Certificate
	// Key signs issued certificates; it matches Cert's public key.
	Key crypto.Signer
}

// LoadOrCreateCA loads the CA from dir/ca.crt and dir/ca.key, or, when
// neither exists, creates a self-signed ECDSA P-256 CA valid for ten years
// with the given common name and writes it there (the key with mode 0600,
// dir created with 0700 when missing). When only one of the two files
// exists, or they do not match, it returns an error rather than replacing
// a CA others may already trust.
func LoadOrCreateCA(dir, commonName string) (*CA, error) {
	certFile := filepath.Join(dir, "ca.crt")
	keyFile := filepath.Join(dir, "ca.key")
	certPEM, certErr := os.ReadFile(certFile)
	keyPEM, keyErr := os.ReadFile(keyFile)
	switch {
	case certErr == nil && keyErr == nil:
		ca, err := parseCA(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("pki: load CA from %s: %w", dir, err)
		}
		return ca, nil
	case errors.Is(certErr, fs.ErrNotExist) && errors.Is(keyErr, fs.ErrNotExist):
		// Create below.
	case certErr != nil && !errors.Is(certErr, fs.ErrNotExist):
		return nil, fmt.Errorf("pki: read CA certificate: %w", certErr)
	case keyErr != nil && !errors.Is(keyErr, fs.ErrNotExist):
		return nil, fmt.Errorf("pki: read CA key: %w", keyErr)
	default:
		return nil, fmt.Errorf("pki: %s holds only one of ca.crt and ca.key: %w", dir, fs.ErrNotExist)
	}

	ca, err := NewCA(commonName)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: marshal CA key: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: create %s: %w", dir, err)
	}
	if err := writeFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, err
	}
	if err := writeFile(certFile, ca.CertPEM(), 0o644); err != nil {
		return nil, err
	}
	return ca, nil
}

// LoadCA loads the CA in dir/ca.crt and dir/ca.key, which must both
// exist (the error matches fs.ErrNotExist when either is missing) and
// match.
func LoadCA(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("pki: read CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, fmt.Errorf("pki: read CA key: %w", err)
	}
	ca, err := parseCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("pki: load CA from %s: %w", dir, err)
	}
	return ca, nil
}

// NewCA creates a self-signed ECDSA P-256 CA in memory, valid for
// CAValidity.
func NewCA(commonName string) (*CA, error) {
	if commonName == "" {
		return nil, fmt.Errorf("%w: CA common name is empty", ErrInvalidSpec)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("pki: create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parse CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// CertPEM returns the CA certificate in PEM form.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// WriteCert writes the CA certificate, not its key, to name (atomically,
// mode 0644), for those who verify what the CA signed.
func (ca *CA) WriteCert(name string) error {
	return writeFile(name, ca.CertPEM(), 0o644)
}

// Pool returns a new pool holding only the CA certificate, for
// tls.Config.RootCAs or ClientCAs.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

func parseCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("pki: certificate %q is not a CA", cert.Subject.CommonName)
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, err
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, errors.New("pki: CA key does not match CA certificate")
	}
	return &CA{Cert: cert, Key: key}, nil
}

func parseCertPEM(data []byte) (*x509.Certificate, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, fmt.Errorf("%w: no CERTIFICATE block", ErrBadPEM)
		}
		if block.Type == "CERTIFICATE" {
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("pki: parse certificate: %w", err)
			}
			return cert, nil
		}
	}
}

func parseKeyPEM(data []byte) (crypto.Signer, error) {
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, fmt.Errorf("%w: no private key block", ErrBadPEM)
		}
		var (
			key any
			err error
		)
		switch block.Type {
		case "PRIVATE KEY":
			key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			key, err = x509.ParseECPrivateKey(block.Bytes)
		case "RSA PRIVATE KEY":
			key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("pki: parse private key: %w", err)
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("pki: private key of type %T cannot sign", key)
		}
		return signer, nil
	}
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ea, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ea.Equal(b)
}

func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("pki: generate serial number: %w", err)
	}
	return serial, nil
}

// writeFile writes data atomically (temporary file, then rename) with the
// given mode.
func writeFile(name string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".tmp*")
	if err != nil {
		return fmt.Errorf("pki: write %s: %w", name, err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("pki: write %s: %w", name, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("pki: write %s: %w", name, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("pki: write %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("pki: write %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		return fmt.Errorf("pki: write %s: %w", name, err)
	}
	return nil
}
