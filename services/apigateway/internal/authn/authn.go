// Package authn establishes who is calling the gateway: from a TLS client
// certificate signed by the API's client CA (user = CN, groups = O, as
// kube-apiserver reads them) or a bearer token: from a static token file,
// or one a TokenAuthenticator knows (ServiceAccount tokens, package
// serviceaccount).
// Identity is established here, once, and travels to the other services in
// gRPC metadata.
//
// The gateway's listeners request client certificates without verifying
// them (tls.RequestClientCert, as kube-apiserver does), so that a
// certificate this package refuses — one of the internal CA's, or any
// other CA's — gets a 401 (Unauthenticated) rather than a failed
// handshake. The handshake still proves that the client holds the
// certificate's key; this package verifies the chain.
package authn

import (
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/meridian-cp/meridian/lib/identity"
)

// ErrInvalidToken: the request carried a bearer token no authenticator
// knows. It is a 401 even where anonymous access would be allowed.
var ErrInvalidToken = errors.New("authn: invalid bearer token")

// Authenticator authenticates requests. It is safe for concurrent use.
type Authenticator struct {
	roots    *x509.CertPool
	tokens   map[string]identity.User
	verified verifiedCerts
	// bearers authenticate the bearer tokens the token file does not
	// hold, in order.
	bearers []TokenAuthenticator
	// audiences are the API's audiences (nil: any), which the token file's
	// tokens, valid for no audience in particular, stand for.
	audiences []string
}

// TokenAuthenticator authenticates bearer tokens of one kind (service
// account tokens, say). audiences are what the request is for; empty
// means the API's. ok is false with a nil error for a token it does not
// recognize; an error means the token is its kind but not valid (expired,
// say). valid are the audiences, among those asked, the token is for.
type TokenAuthenticator interface {
	AuthenticateToken(token string, audiences []string) (u identity.User, valid []string, ok bool, err error)
}

// Option configures an Authenticator.
type Option func(*Authenticator)

// WithTokenAuthenticator adds an authenticator of bearer tokens, tried
// after the token file, in the order added.
func WithTokenAuthenticator(t TokenAuthenticator) Option {
	return func(a *Authenticator) { a.bearers = append(a.bearers, t) }
}

// WithAPIAudiences sets the API's audiences (kube-apiserver's
// --api-audiences): a TokenReview asking for others does not authenticate
// the token file's tokens.
func WithAPIAudiences(audiences []string) Option {
	return func(a *Authenticator) { a.audiences = audiences }
}

// New returns an Authenticator that accepts client certificates signed by
// roots (nil: none), which must be the API's client CA alone, the tokens
// of a token file (nil: none), and what opts add.
func New(roots *x509.CertPool, tokens *TokenFile, opts ...Option) *Authenticator {
	a := &Authenticator{roots: roots, verified: newVerifiedCerts()}
	if tokens != nil {
		a.tokens = tokens.users
	}
	for _, o := range opts {
		o(a)
	}
	return a
}

// Credentials are what a request presents.
type Credentials struct {
	// TLS is the connection state; nil for plaintext. Its
	// PeerCertificates are verified against the Authenticator's roots
	// whatever the handshake verified.
	TLS *tls.ConnectionState
	// Authorization is the Authorization header (or gRPC metadata) value.
	Authorization string
}

// Authenticate returns the caller. ok is false for an anonymous caller; err
// is (or wraps) ErrInvalidToken for a bad bearer token.
func (a *Authenticator) Authenticate(c Credentials) (u identity.User, ok bool, err error) {
	// A bearer token is tried first, and alone: a client certificate
	// presented on the same connection, good or bad, plays no part.
	if token, has := bearer(c.Authorization); has {
		u, _, ok, err := a.AuthenticateToken(token, nil)
		return u, ok, err
	}
	if c.TLS != nil && len(c.TLS.PeerCertificates) > 0 && a.roots != nil {
		return a.certUser(c.TLS.PeerCertificates, time.Now())
	}
	return identity.User{}, false, nil
}

// certUser returns the user of a client certificate chain (leaf first)
// that verifies against the roots at now. A chain's verdict is kept (see
// verifiedCerts): verifying it on every request would cost more than the
// rest of a GET.
func (a *Authenticator) certUser(chain []*x509.Certificate, now time.Time) (identity.User, bool, error) {
	leaf := chain[0]
	if u, ok := a.verified.get(leaf.Raw, now); ok {
		return u, true, nil
	}
	inter := x509.NewCertPool()
	for _, cert := range chain[1:] {
		inter.AddCert(cert)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{
		Roots: a.roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return identity.User{}, false, fmt.Errorf("authn: client certificate: %w", err)
	}
	u, ok, err := userFromCert(leaf)
	if err != nil || !ok {
		return u, ok, err
	}
	a.verified.put(leaf.Raw, u, chainExpiry(chains[0]))
	return u, true, nil
}

// userFromCert reads the user of a verified client certificate: the common
// name, and the organizations as groups.
func userFromCert(leaf *x509.Certificate) (identity.User, bool, error) {
	if leaf.Subject.CommonName == "" {
		return identity.User{}, false, errors.New("authn: client certificate has no common name")
	}
	groups := append([]string(nil), leaf.Subject.Organization...)
	return identity.User{Name: leaf.Subject.CommonName, Groups: withAuthenticated(groups)}, true, nil
}

// AuthenticateToken authenticates a bearer token, as a request carrying
// it or a TokenReview naming it: the token file's tokens first, then each
// TokenAuthenticator. audiences are what it must be valid for (a
// TokenReview's spec.audiences); empty means the API's. The token file's
// tokens are valid for the API's audiences only. It returns the user and
// the audiences the token is valid for; the error (ErrInvalidToken
// wrapped, never quoting the token) when none knows it or one rejects it.
func (a *Authenticator) AuthenticateToken(token string, audiences []string) (identity.User, []string, bool, error) {
	if u, ok := a.lookupToken(token); ok {
		valid, err := a.forAPIAudiences(audiences)
		if err != nil {
			return identity.User{}, nil, false, fmt.Errorf("%w: %w", ErrInvalidToken, err)
		}
		return u, valid, true, nil
	}
	for _, t := range a.bearers {
		u, valid, ok, err := t.AuthenticateToken(token, audiences)
		if err != nil {
			return identity.User{}, nil, false, fmt.Errorf("%w: %w", ErrInvalidToken, err)
		}
		if ok {
			return u, valid, true, nil
		}
	}
	return identity.User{}, nil, false, ErrInvalidToken
}

func (a *Authenticator) lookupToken(token string) (identity.User, bool) {
	// Compare every token in constant time so timing does not tell how much
	// of a guess matched.
	var found identity.User
	ok := false
	for t, u := range a.tokens {
		if subtle.ConstantTimeCompare([]byte(t), []byte(token)) == 1 {
			found, ok = u, true
		}
	}
	return found, ok
}

func bearer(h string) (string, bool) {
	const prefix = "bearer "
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	t := strings.TrimSpace(h[len(prefix):])
	return t, t != ""
}

func withAuthenticated(groups []string) []string {
	for _, g := range groups {
		if g == "system:authenticated" {
			return groups
		}
	}
	return append(groups, "system:authenticated")
}

// TokenFile is a static token file in kube-apiserver's --token-auth-file
// format: CSV lines of token,user,uid[,"group1,group2,..."].
type TokenFile struct {
	users map[string]identity.User
}

// LoadTokenFile reads a token file. Errors name the line, never the token.
func LoadTokenFile(path string) (*TokenFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("authn: token file: %w", err)
	}
	defer f.Close()
	return ParseTokenFile(f)
}

// ParseTokenFile parses token file contents.
func ParseTokenFile(r io.Reader) (*TokenFile, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	cr.Comment = '#'
	tf := &TokenFile{users: map[string]identity.User{}}
	for line := 1; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("authn: token file line %d: %w", line, err)
		}
		if len(rec) < 3 {
			return nil, fmt.Errorf("authn: token file line %d: want token,user,uid[,groups], got %d fields", line, len(rec))
		}
		token, name, uid := strings.TrimSpace(rec[0]), strings.TrimSpace(rec[1]), strings.TrimSpace(rec[2])
		if token == "" || name == "" {
			return nil, fmt.Errorf("authn: token file line %d: empty token or user", line)
		}
		if _, dup := tf.users[token]; dup {
			return nil, fmt.Errorf("authn: token file line %d: duplicate token", line)
		}
		var groups []string
		if len(rec) > 3 {
			for _, g := range strings.Split(rec[3], ",") {
				if g = strings.TrimSpace(g); g != "" {
					groups = append(groups, g)
				}
			}
		}
		tf.users[token] = identity.User{Name: name, UID: uid, Groups: withAuthenticated(groups)}
	}
	return tf, nil
}
