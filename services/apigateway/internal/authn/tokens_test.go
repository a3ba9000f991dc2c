package authn_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/oidctest"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authn"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authn/oidc"
)

// TestTokenUnion: the static token file and an OIDC issuer side by side,
// as kube-apiserver's union of token authenticators: a static token is
// the token file's user; an ID token of the issuer is its user; an ID
// token of the issuer that fails verification, a JWT of another issuer
// and an unknown token are invalid (ErrInvalidToken, a 401), and the
// error never quotes the token.
func TestTokenUnion(t *testing.T) {
	is := oidctest.Start(t)
	tokens, err := authn.ParseTokenFile(strings.NewReader("static-token,alice,1\n"))
	if err != nil {
		t.Fatal(err)
	}
	o, err := oidc.New(oidc.Config{Options: oidc.Options{IssuerURL: is.URL, ClientID: "k", CAFile: is.CAFile, UsernamePrefix: "-"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { o.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	a := authn.New(nil, tokens, authn.WithAPITokenAuthenticator(o))

	now := time.Now()
	claims := map[string]any{"iss": is.URL, "aud": "k", "sub": "jane", "exp": now.Add(time.Hour).Unix(), "iat": now.Unix()}
	expired := map[string]any{"iss": is.URL, "aud": "k", "sub": "jane", "exp": now.Add(-time.Hour).Unix(), "iat": now.Add(-2 * time.Hour).Unix()}
	other := oidctest.Start(t)
	for _, tc := range []struct {
		name, token, user string
	}{
		{"static", "static-token", "alice"},
		{"oidc", is.Sign(claims), "jane"},
		{"oidc expired", is.Sign(expired), ""},
		{"other issuer", other.Sign(map[string]any{"iss": other.URL, "aud": "k", "sub": "x", "exp": now.Add(time.Hour).Unix()}), ""},
		{"unknown", "nobody-knows-me", ""},
	} {
		u, ok, err := a.Authenticate(authn.Credentials{Authorization: "Bearer " + tc.token})
		if tc.user != "" {
			if err != nil || !ok || u.Name != tc.user {
				t.Errorf("%s: %+v %v %v, want %s", tc.name, u, ok, err, tc.user)
			}
			continue
		}
		if ok || !errors.Is(err, authn.ErrInvalidToken) {
			t.Errorf("%s: %+v %v %v, want ErrInvalidToken", tc.name, u, ok, err)
		} else if strings.Contains(err.Error(), tc.token) {
			t.Errorf("%s: the error quotes the token: %v", tc.name, err)
		}
	}
}

// TestAnonymousPolicy: which paths each policy admits anonymous
// requests to.
func TestAnonymousPolicy(t *testing.T) {
	for _, tc := range []struct {
		path                       string
		public, authorized, refuse bool
	}{
		{"/healthz", true, true, false},
		{"/livez/ping", true, true, false},
		{"/readyz", true, true, false},
		{"/version", true, true, false},
		{"/version/", true, true, false},
		{"/versions", false, true, false},
		{"/api", false, true, false},
		{"/api/v1/namespaces", false, true, false},
		{"/healthzx", false, true, false},
	} {
		if got := authn.AnonymousPublic.Admits(tc.path); got != tc.public {
			t.Errorf("public admits %s: %v", tc.path, got)
		}
		if got := authn.AnonymousAuthorized.Admits(tc.path); got != tc.authorized {
			t.Errorf("authorized admits %s: %v", tc.path, got)
		}
		if got := authn.AnonymousRefused.Admits(tc.path); got != tc.refuse {
			t.Errorf("refused admits %s: %v", tc.path, got)
		}
	}
}
