package oidc

import (
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/oidctest"
)

// FuzzIDToken feeds the OIDC authenticator random bearer tokens: it must
// never panic, never quote the token in an error, and accept only the
// claims the issuer signed (a token that verifies carries them).
func FuzzIDToken(f *testing.F) {
	is := oidctest.Start(f)
	now := time.Now()
	valid := is.Sign(map[string]any{"iss": is.URL, "aud": clientID, "sub": "u", "exp": now.Add(24 * time.Hour).Unix(), "iat": now.Unix()})
	f.Add(valid)
	f.Add(valid[:len(valid)-2])
	f.Add("a.b.c")
	f.Add("eyJhbGciOiJub25lIn0.eyJpc3MiOiJ4In0.")
	f.Add("static-token")
	a, err := New(Config{Options: Options{IssuerURL: is.URL, ClientID: clientID, CAFile: is.CAFile}, MinRefreshInterval: time.Hour})
	if err != nil {
		f.Fatal(err)
	}
	if err := a.keys.fetch(f.Context()); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, token string) {
		u, ok, err := a.AuthenticateToken(t.Context(), token)
		if err != nil && len(token) > 8 && strings.Contains(err.Error(), token) {
			t.Fatalf("the error quotes the token: %v", err)
		}
		if ok && u.Name != is.URL+"#u" {
			t.Fatalf("accepted %q as %+v", token, u)
		}
	})
}
