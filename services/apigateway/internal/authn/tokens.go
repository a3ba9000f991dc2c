package authn

import (
	"context"
	"fmt"

	"github.com/meridian-cp/meridian/lib/identity"
)

// TokenAuthenticator authenticates bearer tokens other than the static
// token file's (OIDC ID tokens, package oidc). ok is false and err nil for
// a token it does not recognise, so that the next one is asked; err is a
// token it recognised and refuses. Errors never quote the token.
type TokenAuthenticator interface {
	AuthenticateToken(ctx context.Context, token string) (u identity.User, ok bool, err error)
}

// AddTokenAuthenticators makes a ask ts, in order, about the bearer tokens
// the token file does not hold. It must be called before a is used.
func (a *Authenticator) AddTokenAuthenticators(ts ...TokenAuthenticator) {
	a.tokenAuthenticators = append(a.tokenAuthenticators, ts...)
}

// authenticateToken asks the token authenticators about token: the user
// of the first that accepts it, or ErrInvalidToken (wrapping why, when
// one refused it). An authenticator may fetch what it needs (the OIDC
// issuer's keys for a key id it does not know) within its own bound:
// Authenticate has no context, and its callers (the gRPC tap handle, on
// a connection's reader goroutine, among them) wait for it.
func (a *Authenticator) authenticateToken(token string) (identity.User, error) {
	var refused error
	for _, t := range a.tokenAuthenticators {
		u, ok, err := t.AuthenticateToken(context.Background(), token)
		if ok {
			return u, nil
		}
		if err != nil && refused == nil {
			refused = err
		}
	}
	if refused != nil {
		return identity.User{}, fmt.Errorf("%w: %w", ErrInvalidToken, refused)
	}
	return identity.User{}, ErrInvalidToken
}
