package oidc

import (
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/oidctest"
)

// BenchmarkAuthenticateToken is the CPU an RS256 ID token costs a
// request (parse, signature, claims); figures in docs/benchmarks.md.
func BenchmarkAuthenticateToken(b *testing.B) {
	is := oidctest.Start(b)
	a, err := New(Config{Options: Options{IssuerURL: is.URL, ClientID: clientID, CAFile: is.CAFile, GroupsClaim: "groups"}})
	if err != nil {
		b.Fatal(err)
	}
	if err := a.keys.fetch(b.Context()); err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	tok := is.Sign(map[string]any{"iss": is.URL, "aud": clientID, "sub": "u", "groups": []string{"a", "b"}, "exp": now.Add(time.Hour).Unix(), "iat": now.Unix()})
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, err := a.AuthenticateToken(b.Context(), tok); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
