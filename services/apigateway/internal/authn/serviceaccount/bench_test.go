package serviceaccount

import (
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
)

// BenchmarkAuthenticateToken is the cost of authenticating one request's
// service account token: "first" parses it and checks its signature
// (ES256) before the claims and the index lookups; "again" is every later
// request with the same token, whose signature is remembered.
func BenchmarkAuthenticateToken(b *testing.B) {
	f := newFixture(b, nil)
	f.account("demo", "app")
	token := f.mustToken("demo", "app", authenticationv1.TokenRequestSpec{})
	for _, first := range []bool{true, false} {
		name := "again"
		if first {
			name = "first"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if first {
					f.tokens.verified = verifiedTokens{}
				}
				if _, _, ok, err := f.tokens.AuthenticateToken(token, nil); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}
