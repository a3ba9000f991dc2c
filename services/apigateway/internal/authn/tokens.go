package authn

import (
	"context"
	"errors"
	"slices"

	"github.com/meridian-cp/meridian/lib/identity"
)

// APITokenAuthenticator authenticates bearer tokens that are valid for the
// API's audiences alone, as the token file's are: an OIDC issuer's ID
// tokens (package oidc), whose audience is the issuer's client id, not one
// a TokenReview could ask about. ok is false and err nil for a token it
// does not recognise, so that the next authenticator is asked; err is a
// token it recognised and refuses. Errors never quote the token.
type APITokenAuthenticator interface {
	AuthenticateToken(ctx context.Context, token string) (u identity.User, ok bool, err error)
}

// WithAPITokenAuthenticator adds t after the authenticators added before
// it. An authenticator may fetch what it needs (the OIDC issuer's keys for
// a key id it does not know) within its own bound: Authenticate has no
// context, and its callers (the gRPC tap handle, on a connection's reader
// goroutine, among them) wait for it.
func WithAPITokenAuthenticator(t APITokenAuthenticator) Option {
	return func(a *Authenticator) { a.bearers = append(a.bearers, apiTokens{t: t, a: a}) }
}

// apiTokens is an APITokenAuthenticator as a TokenAuthenticator: its
// tokens are valid for the API's audiences.
type apiTokens struct {
	t APITokenAuthenticator
	a *Authenticator
}

func (p apiTokens) AuthenticateToken(token string, audiences []string) (identity.User, []string, bool, error) {
	u, ok, err := p.t.AuthenticateToken(context.Background(), token)
	if err != nil || !ok {
		return identity.User{}, nil, false, err
	}
	valid, err := p.a.forAPIAudiences(audiences)
	if err != nil {
		return identity.User{}, nil, false, err
	}
	return u, valid, true, nil
}

// errNotForAudiences: a token valid for the API's audiences was asked about
// others (a TokenReview's spec.audiences).
var errNotForAudiences = errors.New("not valid for the audiences asked")

// forAPIAudiences returns which of audiences a token valid for the API's
// audiences is valid for: all of them when none are asked or the API
// names none, else those the API names, and errNotForAudiences when that
// leaves none.
func (a *Authenticator) forAPIAudiences(audiences []string) ([]string, error) {
	if len(audiences) == 0 || len(a.audiences) == 0 {
		return audiences, nil
	}
	var valid []string
	for _, want := range audiences {
		if slices.Contains(a.audiences, want) {
			valid = append(valid, want)
		}
	}
	if len(valid) == 0 {
		return nil, errNotForAudiences
	}
	return valid, nil
}
