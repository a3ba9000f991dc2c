// Package oidctest is a real OpenID issuer for tests: an HTTPS server
// serving a discovery document and a JWKS, and signing ID tokens with
// go-jose.
package oidctest

import (
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Issuer is an OpenID issuer. Its methods are safe for concurrent use.
type Issuer struct {
	t testing.TB
	// URL is the issuer URL (its "iss").
	URL string
	// CAFile is a PEM file with the CA of the issuer's serving
	// certificate.
	CAFile string
	srv    *httptest.Server
	// down makes every request fail with 503 while set.
	down atomic.Bool
	// JWKSRequests counts the requests for the keys.
	JWKSRequests atomic.Int64

	mu   sync.Mutex
	keys []*rsa.PrivateKey // guarded by mu; the first signs
	n    int               // guarded by mu; keys made, for kids
	kids []string          // guarded by mu
}

// Start starts an issuer with one RSA key. It stops when the test ends.
func Start(t testing.TB) *Issuer {
	t.Helper()
	is := &Issuer{t: t}
	is.srv = httptest.NewTLSServer(http.HandlerFunc(is.serve))
	t.Cleanup(is.srv.Close)
	is.URL = is.srv.URL
	is.CAFile = filepath.Join(t.TempDir(), "oidc-ca.crt")
	der := is.srv.Certificate().Raw
	if err := os.WriteFile(is.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	is.Rotate(false)
	return is
}

// SetDown makes the issuer answer 503 to everything (down) or serve
// again.
func (is *Issuer) SetDown(down bool) { is.down.Store(down) }

// Rotate makes a new signing key; with keepOld the previous keys stay
// published, otherwise only the new one is.
func (is *Issuer) Rotate(keepOld bool) {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		is.t.Fatal(err)
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	is.n++
	kid := "key-" + strconv.Itoa(is.n)
	if keepOld {
		is.keys = append([]*rsa.PrivateKey{k}, is.keys...)
		is.kids = append([]string{kid}, is.kids...)
	} else {
		is.keys, is.kids = []*rsa.PrivateKey{k}, []string{kid}
	}
}

// KID is the current signing key's id.
func (is *Issuer) KID() string {
	is.mu.Lock()
	defer is.mu.Unlock()
	return is.kids[0]
}

// Sign returns an ID token with claims, signed RS256 with the current key.
func (is *Issuer) Sign(claims map[string]any) string {
	is.mu.Lock()
	key, kid := is.keys[0], is.kids[0]
	is.mu.Unlock()
	return SignWith(is.t, jose.RS256, key, kid, claims)
}

// SignWith signs claims with key (alg) under kid.
func SignWith(t testing.TB, alg jose.SignatureAlgorithm, key any, kid string, claims map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: jose.JSONWebKey{Key: key, KeyID: kid}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (is *Issuer) serve(w http.ResponseWriter, r *http.Request) {
	if is.down.Load() {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/.well-known/openid-configuration":
		_ = json.NewEncoder(w).Encode(map[string]any{
			"issuer": is.URL, "jwks_uri": is.URL + "/keys", "id_token_signing_alg_values_supported": []string{"RS256"},
		})
	case "/keys":
		is.JWKSRequests.Add(1)
		is.mu.Lock()
		set := jose.JSONWebKeySet{}
		for i, k := range is.keys {
			set.Keys = append(set.Keys, jose.JSONWebKey{Key: k.Public(), KeyID: is.kids[i], Algorithm: string(jose.RS256), Use: "sig"})
		}
		is.mu.Unlock()
		_ = json.NewEncoder(w).Encode(set)
	default:
		http.NotFound(w, r)
	}
}
