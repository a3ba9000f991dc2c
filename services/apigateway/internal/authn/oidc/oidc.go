// Package oidc authenticates users by OpenID Connect ID tokens, as
// kube-apiserver's --oidc-* flags do: a bearer token that is a JWT whose
// "iss" is the configured issuer is verified against the issuer's keys
// (its discovery document's jwks_uri), its audience, times and required
// claims are checked, and the user is read from its claims with the
// configured prefixes.
//
// A token of another issuer, or no JWT at all, is not this package's: the
// Authenticator says so (ok false, no error) and the caller asks its other
// token authenticators, as kube-apiserver's union peeks at "iss". The
// issuer may be down when the gateway starts: Run fetches its keys until
// it answers, and refreshes them periodically; a token signed with a key
// not yet known makes the Authenticator fetch them again (at most once per
// MinRefreshInterval).
package oidc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/meridian-cp/meridian/lib/identity"
)

// Timing defaults; Config may change them (tests do).
const (
	// DefaultRefreshInterval is how often Run fetches the issuer's keys
	// once it has them.
	DefaultRefreshInterval = time.Hour
	// DefaultMinRefreshInterval is the least time between two fetches
	// that tokens ask for.
	DefaultMinRefreshInterval = 10 * time.Second
	// fetchTimeout bounds one fetch of the discovery document and keys,
	// and so how long a request whose token needs them waits.
	fetchTimeout = 5 * time.Second
	// leeway is the clock skew allowed on exp, nbf and iat.
	leeway = time.Minute
	// authenticatedGroup is every authenticated user's group.
	authenticatedGroup = "system:authenticated"
)

// Config configures an Authenticator.
type Config struct {
	Options
	// Logger logs; nil means slog.Default().
	Logger *slog.Logger
	// RefreshInterval is how often Run fetches the keys once it has
	// them; 0 means DefaultRefreshInterval. Until the first fetch
	// succeeds Run retries every second, backing off to 30 seconds.
	RefreshInterval time.Duration
	// MinRefreshInterval is the least time between fetches asked for by
	// tokens; 0 means DefaultMinRefreshInterval.
	MinRefreshInterval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Authenticator verifies ID tokens of one issuer. It is safe for
// concurrent use.
type Authenticator struct {
	cfg      Config
	prefix   string
	algs     []jose.SignatureAlgorithm
	required []string
	keys     *keySet
}

// New returns an Authenticator for enabled, valid options; it fetches
// nothing (Run does).
func New(cfg Config) (*Authenticator, error) {
	if !cfg.Enabled() {
		return nil, errors.New("oidc: no issuer URL")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RefreshInterval == 0 {
		cfg.RefreshInterval = DefaultRefreshInterval
	}
	if cfg.MinRefreshInterval == 0 {
		cfg.MinRefreshInterval = DefaultMinRefreshInterval
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("oidc: CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("oidc: CA file %s holds no PEM certificate", cfg.CAFile)
		}
		tlsConf.RootCAs = pool
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = tlsConf
	return &Authenticator{
		cfg:      cfg,
		prefix:   cfg.usernamePrefix(),
		algs:     cfg.algs(),
		required: cfg.requiredClaimKeys(),
		keys: &keySet{
			issuer: cfg.IssuerURL, client: &http.Client{Transport: transport, Timeout: fetchTimeout},
			minInterval: cfg.MinRefreshInterval, now: cfg.Now,
		},
	}, nil
}

// Run fetches the issuer's keys until ctx ends: until a fetch succeeds,
// every second backing off to 30 seconds, then every RefreshInterval.
func (a *Authenticator) Run(ctx context.Context) {
	retry := time.Second
	for {
		fetchCtx, cancel := context.WithTimeout(ctx, fetchTimeout)
		err := a.keys.fetch(fetchCtx)
		cancel()
		wait := a.cfg.RefreshInterval
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			a.cfg.Logger.Warn("oidc: fetching the issuer's keys failed; retrying", "issuer", a.cfg.IssuerURL, "retry", retry, "error", err)
			wait = retry
			retry = min(2*retry, 30*time.Second)
		} else {
			retry = time.Second
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// AuthenticateToken returns the user of an ID token. ok is false and err
// nil when the token is not a JWT of this issuer (another authenticator
// may know it); err says why a token of this issuer is refused. Errors
// never quote the token.
func (a *Authenticator) AuthenticateToken(ctx context.Context, token string) (u identity.User, ok bool, err error) {
	if !a.issued(token) {
		return identity.User{}, false, nil
	}
	u, err = a.verify(ctx, token)
	if err != nil {
		return identity.User{}, false, err
	}
	return u, true, nil
}

// issued reports whether token is a JWT whose unverified "iss" claim is
// the issuer's, as kube-apiserver's authenticator union peeks at it.
func (a *Authenticator) issued(token string) bool {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return false
	}
	var c struct {
		Issuer string `json:"iss"`
	}
	return json.Unmarshal(payload, &c) == nil && c.Issuer == a.cfg.IssuerURL
}

// verify checks an ID token of this issuer and returns its user.
func (a *Authenticator) verify(ctx context.Context, token string) (identity.User, error) {
	tok, err := jwt.ParseSigned(token, a.algs)
	if err != nil {
		return identity.User{}, fmt.Errorf("oidc: malformed ID token: %w", err)
	}
	claims, err := a.verifySignature(ctx, tok)
	if err != nil {
		return identity.User{}, err
	}
	var std jwt.Claims
	if err := json.Unmarshal(claims, &std); err != nil {
		return identity.User{}, fmt.Errorf("oidc: ID token claims: %w", err)
	}
	if std.Expiry == nil {
		return identity.User{}, errors.New("oidc: ID token has no expiry (exp)")
	}
	if err := std.ValidateWithLeeway(jwt.Expected{Issuer: a.cfg.IssuerURL, AnyAudience: jwt.Audience{a.cfg.ClientID}, Time: a.cfg.Now()}, leeway); err != nil {
		return identity.User{}, fmt.Errorf("oidc: ID token: %w", err)
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(claims, &all); err != nil {
		return identity.User{}, fmt.Errorf("oidc: ID token claims: %w", err)
	}
	return a.user(all)
}

// verifySignature checks the token's signature with the issuer's key of
// its kid (every key when it names none), fetching the keys when none
// verifies, and returns the verified payload.
func (a *Authenticator) verifySignature(ctx context.Context, tok *jwt.JSONWebToken) ([]byte, error) {
	if len(tok.Headers) != 1 {
		return nil, errors.New("oidc: ID token must have exactly one signature")
	}
	kid := tok.Headers[0].KeyID
	keys := a.keys.current()
	if payload, ok := verifyWith(tok, keys, kid); ok {
		return payload, nil
	}
	fetchCtx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	if refreshed := a.keys.refreshFor(fetchCtx, keys); refreshed != keys {
		if payload, ok := verifyWith(tok, refreshed, kid); ok {
			return payload, nil
		}
		keys = refreshed
	}
	if keys == nil {
		return nil, errors.New("oidc: the issuer's keys are not available yet")
	}
	return nil, errors.New("oidc: ID token signature does not verify with the issuer's keys")
}

// verifyWith verifies tok with the keys of set named kid (all of them for
// an empty kid).
func verifyWith(tok *jwt.JSONWebToken, set *jose.JSONWebKeySet, kid string) ([]byte, bool) {
	if set == nil {
		return nil, false
	}
	candidates := set.Keys
	if kid != "" {
		candidates = set.Key(kid)
	}
	for _, k := range candidates {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		var payload json.RawMessage
		if err := tok.Claims(k.Key, &payload); err == nil {
			return payload, true
		}
	}
	return nil, false
}

// user reads the user from verified claims.
func (a *Authenticator) user(claims map[string]json.RawMessage) (identity.User, error) {
	claim := a.cfg.usernameClaim()
	var name string
	raw, ok := claims[claim]
	if !ok {
		return identity.User{}, fmt.Errorf("oidc: ID token has no %q claim", claim)
	}
	if err := json.Unmarshal(raw, &name); err != nil || name == "" {
		return identity.User{}, fmt.Errorf("oidc: the %q claim is not a non-empty string", claim)
	}
	if claim == "email" {
		// kube-apiserver's rule: an email_verified claim, when present,
		// must be true.
		if raw, has := claims["email_verified"]; has {
			var verified bool
			if err := json.Unmarshal(raw, &verified); err != nil {
				return identity.User{}, errors.New("oidc: the email_verified claim is not a boolean")
			}
			if !verified {
				return identity.User{}, errors.New("oidc: email not verified")
			}
		}
	}
	for _, k := range a.required {
		var v string
		raw, has := claims[k]
		if !has {
			return identity.User{}, fmt.Errorf("oidc: required claim %q is missing", k)
		}
		if err := json.Unmarshal(raw, &v); err != nil || v != a.cfg.RequiredClaims[k] {
			return identity.User{}, fmt.Errorf("oidc: required claim %q does not have the required value", k)
		}
	}
	u := identity.User{Name: a.prefix + name}
	if g := a.cfg.GroupsClaim; g != "" {
		if raw, has := claims[g]; has {
			groups, err := stringOrList(raw)
			if err != nil {
				return identity.User{}, fmt.Errorf("oidc: the %q claim: %w", g, err)
			}
			for _, group := range groups {
				u.Groups = append(u.Groups, a.cfg.GroupsPrefix+group)
			}
		}
	}
	u.Groups = append(u.Groups, authenticatedGroup)
	return u, nil
}

// stringOrList reads a claim that is a string or a list of strings, as
// kube-apiserver reads the groups claim.
func stringOrList(raw json.RawMessage) ([]string, error) {
	var list []string
	if err := json.Unmarshal(raw, &list); err == nil {
		return list, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, errors.New("neither a string nor a list of strings")
	}
	return []string{s}, nil
}
