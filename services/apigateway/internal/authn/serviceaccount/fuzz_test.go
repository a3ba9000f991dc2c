package serviceaccount

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/meridian-cp/meridian/lib/pki"
	"k8s.io/apimachinery/pkg/types"
)

// staticObjects is a fixed set of existing objects, for the fuzz target,
// which must not start a store per input.
type staticObjects map[string]types.UID

func (s staticObjects) UID(kind, namespace, name string) (types.UID, bool) {
	uid, ok := s[kind+"/"+namespace+"/"+name]
	return uid, ok
}

// FuzzServiceAccountToken feeds arbitrary bearer tokens to the service
// account authenticator: it never panics, and whatever it accepts is the
// one service account that exists, in its groups, for the API's audience.
func FuzzServiceAccountToken(f *testing.F) {
	dir := f.TempDir()
	key, pub := filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if _, err := pki.LoadOrCreateSigningKey(key, pub); err != nil {
		f.Fatal(err)
	}
	tokens, err := New(Config{Issuer: testIssuer, KeyFiles: []string{pub},
		Objects: staticObjects{"ServiceAccount/demo/app": "uid-1", "Secret/demo/s": "uid-2"}})
	if err != nil {
		f.Fatal(err)
	}
	priv, err := LoadPrivateKey(key)
	if err != nil {
		f.Fatal(err)
	}
	kid, _ := KeyID(priv.Public())
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: priv, KeyID: kid}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		f.Fatal(err)
	}
	now := time.Now()
	sign := func(c jwt.Claims, k kubernetesClaims) string {
		tok, err := jwt.Signed(signer).Claims(c).Claims(privateClaims{Kubernetes: k}).Serialize()
		if err != nil {
			f.Fatal(err)
		}
		return tok
	}
	valid := jwt.Claims{Issuer: testIssuer, Subject: "system:serviceaccount:demo:app", Audience: jwt.Audience{testIssuer},
		Expiry: jwt.NewNumericDate(now.Add(24 * time.Hour)), IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now), ID: "jti"}
	account := kubernetesClaims{Namespace: "demo", ServiceAccount: ref{Name: "app", UID: "uid-1"}}
	good := sign(valid, account)
	f.Add(good)
	f.Add(good[:len(good)-5])
	f.Add(strings.Replace(good, ".", "..", 1))
	f.Add(sign(valid, kubernetesClaims{Namespace: "demo", ServiceAccount: ref{Name: "app", UID: "uid-1"}, Secret: &ref{Name: "s", UID: "uid-2"}}))
	f.Add(sign(valid, kubernetesClaims{Namespace: "other", ServiceAccount: ref{Name: "app", UID: "uid-1"}}))
	expired := valid
	expired.Expiry = jwt.NewNumericDate(now.Add(-time.Hour))
	f.Add(sign(expired, account))
	f.Add("eyJhbGciOiJub25lIn0.eyJpc3MiOiJodHRwczovL21lcmlkaWFuLnRlc3Q6NjQ0MyJ9.")
	f.Add("a.b.c")
	f.Add("")

	if u, _, ok, err := tokens.AuthenticateToken(good, nil); !ok || err != nil || u.Name != "system:serviceaccount:demo:app" {
		f.Fatalf("the valid seed does not authenticate: %v, %v", ok, err)
	}
	f.Fuzz(func(t *testing.T, token string) {
		u, aud, ok, err := tokens.AuthenticateToken(token, nil)
		if ok && err != nil {
			t.Fatalf("accepted with an error: %v", err)
		}
		if !ok {
			return
		}
		if u.Name != "system:serviceaccount:demo:app" || u.UID != "uid-1" || len(aud) != 1 || aud[0] != testIssuer {
			t.Fatalf("accepted as %+v for %v", u, aud)
		}
	})
}
