package oidc

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"flag"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/meridian-cp/meridian/lib/oidctest"
)

const clientID = "meridian"

// newAuth returns an Authenticator for the issuer with opts applied, its
// keys fetched once (as Run's first round does).
func newAuth(t *testing.T, is *oidctest.Issuer, opts func(*Options)) *Authenticator {
	t.Helper()
	o := Options{IssuerURL: is.URL, ClientID: clientID, CAFile: is.CAFile}
	if opts != nil {
		opts(&o)
	}
	a, err := New(Config{Options: o, MinRefreshInterval: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.keys.fetch(t.Context()); err != nil {
		t.Fatal(err)
	}
	return a
}

// claims are valid claims for the issuer, with the changes in kv (a nil
// value deletes a claim).
func claims(is *oidctest.Issuer, kv ...any) map[string]any {
	now := time.Now()
	c := map[string]any{
		"iss": is.URL, "aud": clientID, "sub": "u-123",
		"exp": now.Add(time.Hour).Unix(), "iat": now.Unix(), "nbf": now.Unix(),
	}
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(c, kv[i].(string))
		} else {
			c[kv[i].(string)] = kv[i+1]
		}
	}
	return c
}

// TestClaimRules: every rule an ID token of the issuer must pass, and the
// user it yields, each case as a user would configure and present it.
func TestClaimRules(t *testing.T) {
	is := oidctest.Start(t)
	now := time.Now()
	other := oidctest.Start(t) // another issuer's key: a forged signature
	forged := func(c map[string]any) string {
		k, _ := rsa.GenerateKey(rand.Reader, 2048)
		return oidctest.SignWith(t, jose.RS256, k, is.KID(), c)
	}
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	cases := []struct {
		name   string
		opts   func(*Options)
		token  string
		user   string
		groups []string
		errSub string // "" with user == "": not this issuer's token
	}{
		{name: "sub with the issuer prefix", token: is.Sign(claims(is)), user: is.URL + "#u-123", groups: []string{"system:authenticated"}},
		{name: "prefix disabled", opts: func(o *Options) { o.UsernamePrefix = "-" }, token: is.Sign(claims(is)), user: "u-123", groups: []string{"system:authenticated"}},
		{name: "explicit prefix", opts: func(o *Options) { o.UsernamePrefix = "oidc:" }, token: is.Sign(claims(is)), user: "oidc:u-123"},
		{name: "email claim has no default prefix", opts: func(o *Options) { o.UsernameClaim = "email" },
			token: is.Sign(claims(is, "email", "jane@example.com", "email_verified", true)), user: "jane@example.com"},
		{name: "email without email_verified", opts: func(o *Options) { o.UsernameClaim = "email" },
			token: is.Sign(claims(is, "email", "jane@example.com")), user: "jane@example.com"},
		{name: "email not verified", opts: func(o *Options) { o.UsernameClaim = "email" },
			token: is.Sign(claims(is, "email", "jane@example.com", "email_verified", false)), errSub: "email not verified"},
		{name: "email_verified not a boolean", opts: func(o *Options) { o.UsernameClaim = "email" },
			token: is.Sign(claims(is, "email", "jane@example.com", "email_verified", "yes")), errSub: "not a boolean"},
		{name: "username claim missing", opts: func(o *Options) { o.UsernameClaim = "email" }, token: is.Sign(claims(is)), errSub: `no "email" claim`},
		{name: "username claim not a string", opts: func(o *Options) { o.UsernameClaim = "preferred_username" }, token: is.Sign(claims(is, "preferred_username", 42)), errSub: "not a non-empty string"},
		{name: "groups list with prefix", opts: func(o *Options) { o.GroupsClaim, o.GroupsPrefix = "groups", "oidc:" },
			token: is.Sign(claims(is, "groups", []string{"dev", "ops"})), user: is.URL + "#u-123", groups: []string{"oidc:dev", "oidc:ops", "system:authenticated"}},
		{name: "groups as one string", opts: func(o *Options) { o.GroupsClaim = "groups" },
			token: is.Sign(claims(is, "groups", "dev")), user: is.URL + "#u-123", groups: []string{"dev", "system:authenticated"}},
		{name: "groups malformed", opts: func(o *Options) { o.GroupsClaim = "groups" }, token: is.Sign(claims(is, "groups", 7)), errSub: "neither a string nor a list"},
		{name: "required claim present", opts: func(o *Options) { o.RequiredClaims = map[string]string{"hd": "example.com"} },
			token: is.Sign(claims(is, "hd", "example.com")), user: is.URL + "#u-123"},
		{name: "required claim missing", opts: func(o *Options) { o.RequiredClaims = map[string]string{"hd": "example.com"} },
			token: is.Sign(claims(is)), errSub: `required claim "hd" is missing`},
		{name: "required claim wrong", opts: func(o *Options) { o.RequiredClaims = map[string]string{"hd": "example.com"} },
			token: is.Sign(claims(is, "hd", "evil.com")), errSub: `required claim "hd" does not have`},
		{name: "audience list with the client", token: is.Sign(claims(is, "aud", []string{"x", clientID})), user: is.URL + "#u-123"},
		{name: "wrong audience", token: is.Sign(claims(is, "aud", "someone-else")), errSub: "audience"},
		{name: "expired", token: is.Sign(claims(is, "exp", now.Add(-2*time.Minute).Unix())), errSub: "expired"},
		{name: "expired within the skew", token: is.Sign(claims(is, "exp", now.Add(-30*time.Second).Unix())), user: is.URL + "#u-123"},
		{name: "no exp", token: is.Sign(claims(is, "exp", nil)), errSub: "no expiry"},
		{name: "not yet valid", token: is.Sign(claims(is, "nbf", now.Add(5*time.Minute).Unix())), errSub: "not valid yet"},
		{name: "issued in the future", token: is.Sign(claims(is, "iat", now.Add(5*time.Minute).Unix())), errSub: "future"},
		{name: "forged signature", token: forged(claims(is)), errSub: "does not verify"},
		{name: "unknown kid", token: oidctest.SignWith(t, jose.RS256, mustKey(t), "nobody", claims(is)), errSub: "does not verify"},
		{name: "algorithm not allowed", token: oidctest.SignWith(t, jose.ES256, ec, "ec", claims(is)), errSub: "malformed"},
		{name: "another issuer falls through", token: other.Sign(claims(other))},
		{name: "not a JWT falls through", token: "static-token-abc"},
		{name: "garbage payload falls through", token: "a.b.c"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := newAuth(t, is, tc.opts)
			u, ok, err := a.AuthenticateToken(t.Context(), tc.token)
			switch {
			case tc.errSub != "":
				if err == nil || ok || !strings.Contains(err.Error(), tc.errSub) {
					t.Fatalf("got %+v %v %v, want an error containing %q", u, ok, err, tc.errSub)
				}
				if strings.Contains(err.Error(), tc.token) {
					t.Errorf("the error quotes the token: %v", err)
				}
			case tc.user == "":
				if ok || err != nil {
					t.Fatalf("got %+v %v %v, want it left to other authenticators", u, ok, err)
				}
			default:
				if err != nil || !ok || u.Name != tc.user {
					t.Fatalf("got %+v %v %v, want user %q", u, ok, err, tc.user)
				}
				if tc.groups != nil && !slices.Equal(u.Groups, tc.groups) {
					t.Errorf("groups %v, want %v", u.Groups, tc.groups)
				}
				if !slices.Contains(u.Groups, "system:authenticated") {
					t.Errorf("groups %v lack system:authenticated", u.Groups)
				}
			}
		})
	}
}

func mustKey(t *testing.T) *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestSigningAlgs: --oidc-signing-algs admits the algorithms listed and
// only those.
func TestSigningAlgs(t *testing.T) {
	is := oidctest.Start(t)
	a := newAuth(t, is, func(o *Options) { o.SigningAlgs = []string{"ES256"} })
	if _, ok, err := a.AuthenticateToken(t.Context(), is.Sign(claims(is))); ok || err == nil {
		t.Errorf("RS256 token with only ES256 allowed: %v %v, want refused", ok, err)
	}
	if _, err := New(Config{Options: Options{IssuerURL: is.URL, ClientID: "x", SigningAlgs: []string{"HS256"}}}); err == nil {
		t.Error("HS256 accepted as a signing algorithm")
	}
}

// TestKeyRotation: the issuer rotates its key; a token signed with the
// new kid makes the authenticator fetch the keys again, and a flood of
// tokens with unknown kids does not make it fetch more than once per
// MinRefreshInterval.
func TestKeyRotation(t *testing.T) {
	is := oidctest.Start(t)
	a := newAuth(t, is, nil)
	if _, ok, err := a.AuthenticateToken(t.Context(), is.Sign(claims(is))); !ok || err != nil {
		t.Fatalf("before rotation: %v %v", ok, err)
	}
	before := is.JWKSRequests.Load()
	is.Rotate(false)
	if _, ok, err := a.AuthenticateToken(t.Context(), is.Sign(claims(is))); !ok || err != nil {
		t.Fatalf("token of the new key: %v %v", ok, err)
	}
	if got := is.JWKSRequests.Load(); got != before+1 {
		t.Errorf("JWKS fetched %d times for the new kid, want 1", got-before)
	}
	// Rate limit: with a long MinRefreshInterval, unknown kids make one
	// fetch in all.
	a.cfg.MinRefreshInterval, a.keys.minInterval = time.Hour, time.Hour
	before = is.JWKSRequests.Load()
	for i := range 20 {
		tok := oidctest.SignWith(t, jose.RS256, mustKey(t), "made-up-"+string(rune('a'+i)), claims(is))
		if _, ok, err := a.AuthenticateToken(t.Context(), tok); ok || err == nil {
			t.Fatalf("unknown kid accepted: %v %v", ok, err)
		}
	}
	if got := is.JWKSRequests.Load() - before; got > 1 {
		t.Errorf("unknown kids made %d fetches, want at most 1", got)
	}
}

// TestIssuerDownAtStart: the authenticator is made while the issuer is
// down; tokens are refused (not accepted, not a panic) until it is up,
// then accepted, whether Run or a token's fetch gets the keys first.
func TestIssuerDownAtStart(t *testing.T) {
	is := oidctest.Start(t)
	is.SetDown(true)
	a, err := New(Config{Options: Options{IssuerURL: is.URL, ClientID: clientID, CAFile: is.CAFile}, MinRefreshInterval: time.Nanosecond, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	tok := is.Sign(claims(is))
	if _, ok, err := a.AuthenticateToken(t.Context(), tok); ok || err == nil || !strings.Contains(err.Error(), "not available") {
		t.Fatalf("issuer down: %v %v, want the keys not available", ok, err)
	}
	is.SetDown(false)
	if _, ok, err := a.AuthenticateToken(t.Context(), tok); !ok || err != nil {
		t.Fatalf("issuer up: %v %v", ok, err)
	}
}

// TestOptions: validation and kube-apiserver's flag names and defaults.
func TestOptions(t *testing.T) {
	var o Options
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.AddFlags(fs)
	if err := fs.Parse([]string{"--oidc-issuer-url=https://issuer.example", "--oidc-client-id=k",
		"--oidc-required-claim=a=b", "--oidc-required-claim=c=d=e", "--oidc-signing-algs=RS256,ES256", "--oidc-groups-claim=groups"}); err != nil {
		t.Fatal(err)
	}
	if o.UsernameClaim != "sub" || o.RequiredClaims["a"] != "b" || o.RequiredClaims["c"] != "d=e" || !slices.Equal(o.SigningAlgs, []string{"RS256", "ES256"}) {
		t.Errorf("parsed %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Error(err)
	}
	if o.usernamePrefix() != "https://issuer.example#" {
		t.Errorf("default prefix %q", o.usernamePrefix())
	}
	if err := fs.Parse([]string{"--oidc-required-claim=novalue"}); err == nil {
		t.Error("a required claim without '=' was accepted")
	}
	for _, bad := range []Options{
		{IssuerURL: "http://issuer.example", ClientID: "k"},
		{IssuerURL: "https://issuer.example"},
		{IssuerURL: "https://issuer.example?x=1", ClientID: "k"},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v validated", bad)
		}
	}
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
