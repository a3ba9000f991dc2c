package pkiplan

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/meridian-cp/meridian/lib/pki"
)

// The layout of a deployment's directory (the all-in-one's data
// directory, or the --dir of `meridian pki`):
//
//	ca/api/ca.crt, ca.key          the API CA
//	ca/internal/ca.crt, ca.key     the internal CA
//	pki/api-ca.crt                 the API CA's certificate
//	pki/internal-ca.crt            the internal CA's certificate
//	pki/<name>.crt, <name>.key     each certificate and its key
//
// Directories are created with mode 0700, keys written with 0600. The CA
// keys stay under ca/: pki/ holds what the services read, and no key there
// can sign a certificate. Every file is written by rename, so a reader
// sees the old file or the new one.
const (
	// CADir holds the authorities, one directory each.
	CADir = "ca"
	// CertDir holds the certificates, their keys and the authorities'
	// certificates.
	CertDir = "pki"
)

// Dir is where the authority's certificate and key are kept under root.
func (a Authority) Dir(root string) string { return filepath.Join(root, CADir, string(a)) }

// CertFile is where the authority's certificate is copied under root, for
// the flags that take it.
func (a Authority) CertFile(root string) string {
	return filepath.Join(root, CertDir, string(a)+"-ca.crt")
}

// CertFile is where c's certificate is kept under root.
func (c Cert) CertFile(root string) string { return filepath.Join(root, CertDir, c.Name+".crt") }

// KeyFile is where c's key is kept under root.
func (c Cert) KeyFile(root string) string { return filepath.Join(root, CertDir, c.Name+".key") }

// Path is the file f of c under root.
func (c Cert) Path(root string, f File) string {
	switch f {
	case CertFile:
		return c.CertFile(root)
	case KeyFile:
		return c.KeyFile(root)
	case APICAFile:
		return APIAuthority.CertFile(root)
	default:
		return InternalAuthority.CertFile(root)
	}
}

// CAs are a deployment's two authorities.
type CAs struct {
	// API is the API CA.
	API *pki.CA
	// Internal is the internal CA.
	Internal *pki.CA
}

// Of returns the authority a.
func (c CAs) Of(a Authority) *pki.CA {
	if a == APIAuthority {
		return c.API
	}
	return c.Internal
}

// LoadOrCreateCAs loads the authorities kept under root, creating each
// that is missing (see pki.LoadOrCreateCA), and copies their certificates
// into root/pki.
func LoadOrCreateCAs(root string) (CAs, error) {
	return loadCAs(root, func(a Authority) (*pki.CA, error) { return pki.LoadOrCreateCA(a.Dir(root), a.CommonName()) })
}

// LoadCAs loads the authorities kept under root, which must exist (the
// error matches fs.ErrNotExist when one is missing), and copies their
// certificates into root/pki.
func LoadCAs(root string) (CAs, error) {
	return loadCAs(root, func(a Authority) (*pki.CA, error) { return pki.LoadCA(a.Dir(root)) })
}

// LoadSigner loads only authority a from under root (its key must be
// there; the other authority's need not be) and copies its certificate
// into root/pki. It serves `meridian pki issue` in a Helm chart's init
// containers, which are given only the internal CA: a pod never holds the
// API CA's key. The other field of the result is nil.
func LoadSigner(root string, a Authority) (CAs, error) {
	return loadCAsOf(root, []Authority{a}, func(a Authority) (*pki.CA, error) { return pki.LoadCA(a.Dir(root)) })
}

func loadCAs(root string, load func(Authority) (*pki.CA, error)) (CAs, error) {
	return loadCAsOf(root, Authorities(), load)
}

func loadCAsOf(root string, authorities []Authority, load func(Authority) (*pki.CA, error)) (CAs, error) {
	var cas CAs
	for _, a := range authorities {
		ca, err := load(a)
		if err != nil {
			return CAs{}, fmt.Errorf("pkiplan: the %s CA: %w", a, err)
		}
		if a == APIAuthority {
			cas.API = ca
		} else {
			cas.Internal = ca
		}
	}
	if err := os.MkdirAll(filepath.Join(root, CertDir), 0o700); err != nil {
		return CAs{}, fmt.Errorf("pkiplan: %w", err)
	}
	for _, a := range authorities {
		if err := cas.Of(a).WriteCert(a.CertFile(root)); err != nil {
			return CAs{}, fmt.Errorf("pkiplan: %w", err)
		}
	}
	return cas, nil
}

// Issue returns c's pair kept under root when it still matches the plan
// and its signer (see pki.CA.LoadOrIssue), or issues and writes it anew.
func (c CAs) Issue(root string, cert Cert) (pki.KeyPair, error) {
	kp, err := c.Of(cert.Signer).LoadOrIssue(filepath.Join(root, CertDir), cert.Name, cert.Spec)
	if err != nil {
		return pki.KeyPair{}, fmt.Errorf("pkiplan: certificate %s: %w", cert.Name, err)
	}
	return kp, nil
}

// Renew issues c's pair anew, whatever root holds, replacing the files
// by rename: the services that read them pick the new pair up (see
// pki.KeyPairReloader).
func (c CAs) Renew(root string, cert Cert) (pki.KeyPair, error) {
	kp, err := c.Of(cert.Signer).IssueFiles(filepath.Join(root, CertDir), cert.Name, cert.Spec)
	if err != nil {
		return pki.KeyPair{}, fmt.Errorf("pkiplan: certificate %s: %w", cert.Name, err)
	}
	return kp, nil
}

// The service account issuer's token signing key (see
// pki.LoadOrCreateSigningKey): the gateway's
// --service-account-signing-key-file and --service-account-key-file.
const (
	// ServiceAccountKeyName is the private key's file under CertDir.
	ServiceAccountKeyName = "sa.key"
	// ServiceAccountPublicKeysName is the public keys' file under CertDir:
	// the current key's first, then the replaced keys'.
	ServiceAccountPublicKeysName = "sa.pub"
)

// ServiceAccountKeyFile is the token signing key's file under root.
func ServiceAccountKeyFile(root string) string {
	return filepath.Join(root, CertDir, ServiceAccountKeyName)
}

// ServiceAccountPublicKeysFile is the token verification keys' file under
// root.
func ServiceAccountPublicKeysFile(root string) string {
	return filepath.Join(root, CertDir, ServiceAccountPublicKeysName)
}
