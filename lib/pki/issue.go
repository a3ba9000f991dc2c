package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// DefaultValidity is the validity of an issued certificate whose spec
// leaves Validity zero.
const DefaultValidity = 365 * 24 * time.Hour

// RenewBefore is how close to expiry a certificate found by LoadOrIssue may
// be and still be reused. For certificates valid for less than twice this,
// half their validity is used instead, so short-lived test certificates are
// not reissued on every start.
const RenewBefore = 30 * 24 * time.Hour

// CertSpec describes a leaf certificate to issue.
type CertSpec struct {
	// CommonName is the subject CN; for a client certificate, the user
	// name Kubernetes-style authenticators read.
	CommonName string
	// Organizations is the subject O; for a client certificate, the groups.
	Organizations []string
	// DNSNames are the DNS subject alternative names.
	DNSNames []string
	// IPAddresses are the IP subject alternative names.
	IPAddresses []net.IP
	// Server adds ExtKeyUsageServerAuth.
	Server bool
	// Client adds ExtKeyUsageClientAuth.
	Client bool
	// Validity is how long the certificate is valid; 0 means
	// DefaultValidity (one year).
	Validity time.Duration
}

func (s CertSpec) validate() error {
	var errs []error
	if s.CommonName == "" && len(s.DNSNames) == 0 && len(s.IPAddresses) == 0 {
		errs = append(errs, errors.New("neither a common name nor a subject alternative name"))
	}
	if !s.Server && !s.Client {
		errs = append(errs, errors.New("neither Server nor Client usage"))
	}
	if s.Validity < 0 {
		errs = append(errs, fmt.Errorf("negative validity %s", s.Validity))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	return nil
}

func (s CertSpec) validity() time.Duration {
	if s.Validity == 0 {
		return DefaultValidity
	}
	return s.Validity
}

func (s CertSpec) extKeyUsage() []x509.ExtKeyUsage {
	var u []x509.ExtKeyUsage
	if s.Server {
		u = append(u, x509.ExtKeyUsageServerAuth)
	}
	if s.Client {
		u = append(u, x509.ExtKeyUsageClientAuth)
	}
	return u
}

// KeyPair is an issued certificate and its private key in PEM form.
type KeyPair struct {
	// CertPEM is the certificate.
	CertPEM []byte
	// KeyPEM is the PKCS#8 private key. Never log it.
	KeyPEM []byte
	// CertFile and KeyFile are where the pair is stored; empty when it was
	// not written to files.
	CertFile, KeyFile string
}

// TLSCertificate returns the pair as a tls.Certificate, with Leaf set.
func (kp KeyPair) TLSCertificate() (tls.Certificate, error) {
	c, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("pki: load key pair: %w", err)
	}
	return c, nil
}

// Issue issues a certificate for spec signed by ca, with a new ECDSA P-256
// key, in memory.
func (ca *CA) Issue(spec CertSpec) (KeyPair, error) {
	if err := spec.validate(); err != nil {
		return KeyPair{}, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, fmt.Errorf("pki: generate key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return KeyPair{}, err
	}
	now := time.Now()
	notAfter := now.Add(spec.validity())
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject: pkix.Name{
			CommonName:   spec.CommonName,
			Organization: slices.Clone(spec.Organizations),
		},
		DNSNames:              slices.Clone(spec.DNSNames),
		IPAddresses:           slices.Clone(spec.IPAddresses),
		NotBefore:             now.Add(-5 * time.Minute),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           spec.extKeyUsage(),
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("pki: create certificate for %q: %w", spec.CommonName, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("pki: marshal key: %w", err)
	}
	return KeyPair{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// LoadOrIssue returns the pair stored in dir/<name>.crt and dir/<name>.key
// when both exist, the key matches, the certificate is signed by ca, does
// not expire within RenewBefore, and its CN, O, DNS and IP SANs and key
// usages equal spec's (order and duplicates ignored). Otherwise it issues a
// new pair and writes it there (the key with mode 0600), replacing what was
// there. name must be a plain file name.
func (ca *CA) LoadOrIssue(dir, name string, spec CertSpec) (KeyPair, error) {
	if err := checkFileName(name); err != nil {
		return KeyPair{}, err
	}
	if err := spec.validate(); err != nil {
		return KeyPair{}, err
	}
	certFile := filepath.Join(dir, name+".crt")
	keyFile := filepath.Join(dir, name+".key")
	certPEM, certErr := os.ReadFile(certFile)
	keyPEM, keyErr := os.ReadFile(keyFile)
	if certErr == nil && keyErr == nil {
		if ca.reusable(certPEM, keyPEM, spec, time.Now()) {
			return KeyPair{CertPEM: certPEM, KeyPEM: keyPEM, CertFile: certFile, KeyFile: keyFile}, nil
		}
	} else {
		for _, err := range []error{certErr, keyErr} {
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return KeyPair{}, fmt.Errorf("pki: read %s: %w", name, err)
			}
		}
	}
	return ca.IssueFiles(dir, name, spec)
}

// IssueFiles issues a new pair for spec, whatever dir holds, and writes it
// to dir/<name>.crt and dir/<name>.key (the key with mode 0600, dir
// created with 0700 when missing), each by rename, so that a reader sees
// the old file or the new one, never half of one. The key is written
// first. name must be a plain file name.
func (ca *CA) IssueFiles(dir, name string, spec CertSpec) (KeyPair, error) {
	if err := checkFileName(name); err != nil {
		return KeyPair{}, err
	}
	kp, err := ca.Issue(spec)
	if err != nil {
		return KeyPair{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return KeyPair{}, fmt.Errorf("pki: create %s: %w", dir, err)
	}
	certFile := filepath.Join(dir, name+".crt")
	keyFile := filepath.Join(dir, name+".key")
	// Key first: a crash between the two writes leaves a mismatched pair,
	// which LoadOrIssue detects and reissues.
	if err := writeFile(keyFile, kp.KeyPEM, 0o600); err != nil {
		return KeyPair{}, err
	}
	if err := writeFile(certFile, kp.CertPEM, 0o644); err != nil {
		return KeyPair{}, err
	}
	kp.CertFile, kp.KeyFile = certFile, keyFile
	return kp, nil
}

func checkFileName(name string) error {
	if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") {
		return fmt.Errorf("%w: bad file name %q", ErrInvalidSpec, name)
	}
	return nil
}

// reusable reports whether a stored pair satisfies spec (see LoadOrIssue).
func (ca *CA) reusable(certPEM, keyPEM []byte, spec CertSpec, now time.Time) bool {
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return false
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil || !publicKeysEqual(cert.PublicKey, key.Public()) {
		return false
	}
	if cert.CheckSignatureFrom(ca.Cert) != nil || !bytesEqual(cert.RawIssuer, ca.Cert.RawSubject) {
		return false
	}
	renew := RenewBefore
	if v := spec.validity(); v < 2*renew {
		renew = v / 2
	}
	if now.Before(cert.NotBefore) || now.Add(renew).After(cert.NotAfter) {
		return false
	}
	return cert.Subject.CommonName == spec.CommonName &&
		sameSet(cert.Subject.Organization, spec.Organizations) &&
		sameSet(cert.DNSNames, spec.DNSNames) &&
		sameSet(ipStrings(cert.IPAddresses), ipStrings(spec.IPAddresses)) &&
		sameSet(cert.ExtKeyUsage, spec.extKeyUsage())
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }

func ipStrings(ips []net.IP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

func sameSet[T comparable](a, b []T) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) {
			return false
		}
	}
	return true
}
