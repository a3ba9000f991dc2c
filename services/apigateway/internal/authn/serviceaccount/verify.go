package serviceaccount

import (
	"crypto/sha256"
	"errors"
	"strings"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/meridian-cp/meridian/lib/identity"
)

// signatureAlgorithms are the algorithms a token may be signed with.
var signatureAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.ES384, jose.ES512}

// Errors of AuthenticateToken. None of them quotes the token.
var (
	ErrExpired      = errors.New("service account token has expired")
	errNotYetValid  = errors.New("service account token is not valid yet")
	errSignature    = errors.New("service account token does not verify with any key")
	errAudience     = errors.New("service account token is not for any of the audiences")
	errClaims       = errors.New("service account token has invalid claims")
	errNoAccount    = errors.New("service account token's service account does not exist (or has a new UID)")
	errBoundDeleted = errors.New("service account token's bound object does not exist (or has a new UID)")
)

// AuthenticateToken authenticates a bearer token that this issuer signed,
// as kube-apiserver's service account authenticator does. audiences are
// what the request is for (a TokenReview's spec.audiences); empty means
// the API's. ok is false with a nil error when the token is not one of
// this issuer's (not a JWT, or another "iss"): other authenticators may
// know it. A token of this issuer authenticates when it verifies with one
// of the keys, has not expired (a minute's leeway for clock skew), names
// one of the audiences, and its service account and bound object exist
// with the UIDs it records; the user is
// system:serviceaccount:<namespace>:<name> in the groups
// system:serviceaccounts, system:serviceaccounts:<namespace> and
// system:authenticated, with the token's JTI as its credential id and its
// pod and node in its extra. It also returns the audiences the token is
// valid for among those asked.
func (t *Tokens) AuthenticateToken(token string, audiences []string) (u identity.User, valid []string, ok bool, err error) {
	ks := t.keys.current()
	sum := sha256.Sum256([]byte(token))
	v, hit := t.verified.get(sum, ks)
	if !hit {
		if strings.Count(token, ".") != 2 {
			return identity.User{}, nil, false, nil
		}
		tok, err := jwt.ParseSigned(token, signatureAlgorithms)
		if err != nil {
			return identity.User{}, nil, false, nil
		}
		var unverified jwt.Claims
		if err := tok.UnsafeClaimsWithoutVerification(&unverified); err != nil || unverified.Issuer != t.cfg.Issuer {
			return identity.User{}, nil, false, nil
		}
		if !verify(ks, tok, &v.public, &v.private) {
			return identity.User{}, nil, false, errSignature
		}
		t.verified.put(sum, ks, v)
	}
	return t.check(v, audiences)
}

// check decides a token whose signature verified: its times, its
// audiences, and the objects it names, as they are now.
func (t *Tokens) check(v verifiedToken, audiences []string) (identity.User, []string, bool, error) {
	switch err := v.public.Validate(jwt.Expected{Issuer: t.cfg.Issuer, Time: t.cfg.Now()}); {
	case errors.Is(err, jwt.ErrExpired):
		return identity.User{}, nil, false, ErrExpired
	case errors.Is(err, jwt.ErrNotValidYet), errors.Is(err, jwt.ErrIssuedInTheFuture):
		return identity.User{}, nil, false, errNotYetValid
	case err != nil:
		return identity.User{}, nil, false, errClaims
	}
	if len(audiences) == 0 {
		audiences = t.cfg.APIAudiences
	}
	var valid []string
	for _, a := range audiences {
		if v.public.Audience.Contains(a) {
			valid = append(valid, a)
		}
	}
	if len(valid) == 0 {
		return identity.User{}, nil, false, errAudience
	}
	u, err := t.user(v.public, v.private.Kubernetes)
	if err != nil {
		return identity.User{}, nil, false, err
	}
	return u, valid, true, nil
}

// verify checks the token's signature with the key of ks its header
// names, or with every key when it names none that is known, and decodes
// its claims.
func verify(ks *keySet, tok *jwt.JSONWebToken, public *jwt.Claims, private *privateClaims) bool {
	keys := ks.verify
	kid := ""
	if len(tok.Headers) == 1 {
		kid = tok.Headers[0].KeyID
	}
	for _, k := range keys {
		if k.id == kid {
			return tok.Claims(k.key, public, private) == nil
		}
	}
	for _, k := range keys {
		if tok.Claims(k.key, public, private) == nil {
			return true
		}
	}
	return false
}

// user checks the token's claims against the objects that exist and
// returns its user.
func (t *Tokens) user(public jwt.Claims, k kubernetesClaims) (identity.User, error) {
	namespace, name, ok := splitUserName(public.Subject)
	if !ok || namespace != k.Namespace || name != k.ServiceAccount.Name || k.ServiceAccount.UID == "" || public.ID == "" {
		return identity.User{}, errClaims
	}
	objs := t.cfg.Objects
	if uid, ok := objs.UID(kindServiceAccount, namespace, name); !ok || string(uid) != k.ServiceAccount.UID {
		return identity.User{}, errNoAccount
	}
	extra := map[string][]string{extraCredentialID: {"JTI=" + public.ID}}
	if k.Secret != nil {
		if uid, ok := objs.UID(kindSecret, namespace, k.Secret.Name); !ok || string(uid) != k.Secret.UID {
			return identity.User{}, errBoundDeleted
		}
	}
	if k.Pod != nil {
		if uid, ok := objs.UID(kindPod, namespace, k.Pod.Name); !ok || string(uid) != k.Pod.UID {
			return identity.User{}, errBoundDeleted
		}
		extra[extraPodName] = []string{k.Pod.Name}
		extra[extraPodUID] = []string{k.Pod.UID}
	}
	if k.Node != nil {
		if k.Pod == nil {
			// A token bound to the node itself lives no longer than it.
			if uid, ok := objs.UID(kindNode, "", k.Node.Name); !ok || string(uid) != k.Node.UID {
				return identity.User{}, errBoundDeleted
			}
		}
		extra[extraNodeName] = []string{k.Node.Name}
		if k.Node.UID != "" {
			extra[extraNodeUID] = []string{k.Node.UID}
		}
	}
	return identity.User{
		Name:   public.Subject,
		UID:    k.ServiceAccount.UID,
		Groups: []string{AllServiceAccountsGroup, NamespaceGroup(namespace), "system:authenticated"},
		Extra:  extra,
	}, nil
}
