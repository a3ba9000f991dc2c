package oidc

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"

	jose "github.com/go-jose/go-jose/v4"
)

// Options configure the OIDC authenticator, as kube-apiserver's --oidc-*
// flags do. The zero value (no IssuerURL) is no OIDC authentication.
type Options struct {
	// IssuerURL is the issuer's https URL: ID tokens must carry it as
	// their "iss" claim, and its discovery document is read from
	// IssuerURL + "/.well-known/openid-configuration".
	IssuerURL string
	// ClientID must be one of an ID token's audiences ("aud").
	ClientID string
	// UsernameClaim names the claim holding the user name; empty means
	// "sub".
	UsernameClaim string
	// UsernamePrefix is prepended to user names. Empty: IssuerURL + "#"
	// for every claim but "email", which gets none; "-": none.
	UsernamePrefix string
	// GroupsClaim names the claim (a string or a list of strings) holding
	// the user's groups; empty: none.
	GroupsClaim string
	// GroupsPrefix is prepended to every group.
	GroupsPrefix string
	// CAFile is a PEM bundle verifying the issuer's serving certificate;
	// empty: the system's roots.
	CAFile string
	// RequiredClaims are claims an ID token must carry, with these string
	// values.
	RequiredClaims map[string]string
	// SigningAlgs are the JOSE algorithms accepted; empty means RS256.
	SigningAlgs []string
}

// Enabled reports whether OIDC authentication is configured.
func (o *Options) Enabled() bool { return o.IssuerURL != "" }

// AddFlags defines kube-apiserver's --oidc-* flags on fs, storing them in
// o.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.IssuerURL, "oidc-issuer-url", o.IssuerURL, "https URL of the OpenID issuer whose ID tokens authenticate users (its discovery document and JWKS are fetched from it); empty: no OIDC")
	fs.StringVar(&o.ClientID, "oidc-client-id", o.ClientID, "client ID every ID token must be issued for (its \"aud\"); required with --oidc-issuer-url")
	fs.StringVar(&o.UsernameClaim, "oidc-username-claim", "sub", "ID token claim holding the user name")
	fs.StringVar(&o.UsernamePrefix, "oidc-username-prefix", o.UsernamePrefix, "prefix of OIDC user names; unset: the issuer URL and '#' for claims other than 'email'; '-': none")
	fs.StringVar(&o.GroupsClaim, "oidc-groups-claim", o.GroupsClaim, "ID token claim (a string or list of strings) holding the user's groups; empty: none")
	fs.StringVar(&o.GroupsPrefix, "oidc-groups-prefix", o.GroupsPrefix, "prefix of OIDC groups")
	fs.StringVar(&o.CAFile, "oidc-ca-file", o.CAFile, "PEM CA bundle verifying the issuer's serving certificate; empty: the system's roots")
	fs.Func("oidc-required-claim", "key=value an ID token must carry (repeatable)", func(s string) error {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return fmt.Errorf("want key=value, got %q", s)
		}
		if o.RequiredClaims == nil {
			o.RequiredClaims = map[string]string{}
		}
		o.RequiredClaims[k] = v
		return nil
	})
	fs.Func("oidc-signing-algs", "comma-separated JOSE algorithms ID tokens may be signed with (default RS256)", func(s string) error {
		o.SigningAlgs = nil
		for _, a := range strings.Split(s, ",") {
			if a = strings.TrimSpace(a); a != "" {
				o.SigningAlgs = append(o.SigningAlgs, a)
			}
		}
		return nil
	})
}

// supportedAlgs are the asymmetric algorithms an issuer may sign with,
// as kube-apiserver accepts them.
var supportedAlgs = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512, jose.PS256, jose.PS384, jose.PS512, jose.EdDSA,
}

// Validate reports every problem with enabled options.
func (o *Options) Validate() error {
	if !o.Enabled() {
		return nil
	}
	var errs []error
	u, err := url.Parse(o.IssuerURL)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("oidc: issuer URL: %w", err))
	case u.Scheme != "https" || u.Host == "":
		errs = append(errs, fmt.Errorf("oidc: issuer URL %q is not an https URL", o.IssuerURL))
	case u.RawQuery != "" || u.Fragment != "":
		errs = append(errs, fmt.Errorf("oidc: issuer URL %q has a query or fragment", o.IssuerURL))
	}
	if o.ClientID == "" {
		errs = append(errs, errors.New("oidc: a client ID is required with an issuer URL"))
	}
	for _, a := range o.SigningAlgs {
		if !slices.Contains(supportedAlgs, jose.SignatureAlgorithm(a)) {
			errs = append(errs, fmt.Errorf("oidc: signing algorithm %q is not supported", a))
		}
	}
	return errors.Join(errs...)
}

// usernameClaim, usernamePrefix and algs are the options with their
// defaults applied.
func (o *Options) usernameClaim() string {
	if o.UsernameClaim == "" {
		return "sub"
	}
	return o.UsernameClaim
}

func (o *Options) usernamePrefix() string {
	switch {
	case o.UsernamePrefix == "-":
		return ""
	case o.UsernamePrefix != "":
		return o.UsernamePrefix
	case o.usernameClaim() == "email":
		return ""
	default:
		return o.IssuerURL + "#"
	}
}

func (o *Options) algs() []jose.SignatureAlgorithm {
	if len(o.SigningAlgs) == 0 {
		return []jose.SignatureAlgorithm{jose.RS256}
	}
	algs := make([]jose.SignatureAlgorithm, len(o.SigningAlgs))
	for i, a := range o.SigningAlgs {
		algs[i] = jose.SignatureAlgorithm(a)
	}
	return algs
}

// requiredClaimKeys returns the required claims' keys in order, so that
// errors name the first missing one the same way every time.
func (o *Options) requiredClaimKeys() []string {
	keys := make([]string, 0, len(o.RequiredClaims))
	for k := range o.RequiredClaims {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
