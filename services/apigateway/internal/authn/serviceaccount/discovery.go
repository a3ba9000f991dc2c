package serviceaccount

import (
	"encoding/json"
	"net/url"
)

// OpenID discovery paths, as kube-apiserver serves them.
const (
	// OpenIDConfigPath serves the OpenID Provider configuration.
	OpenIDConfigPath = "/.well-known/openid-configuration"
	// JWKSPath serves the public keys as a JSON Web Key Set.
	JWKSPath = "/openid/v1/jwks"
	// JWKSMediaType is the media type of the JWKS.
	JWKSMediaType = "application/jwk-set+json"
)

// openIDConfig is the discovery document kube-apiserver serves.
type openIDConfig struct {
	Issuer        string   `json:"issuer"`
	JWKSURI       string   `json:"jwks_uri"`
	ResponseTypes []string `json:"response_types_supported"`
	SubjectTypes  []string `json:"subject_types_supported"`
	SigningAlgs   []string `json:"id_token_signing_alg_values_supported"`
}

// DiscoveryServed reports whether the discovery documents are served:
// as kube-apiserver, only when the issuer is an https URL, which is what
// OpenID Connect requires of a provider.
func (t *Tokens) DiscoveryServed() bool {
	u, err := url.Parse(t.cfg.Issuer)
	return err == nil && u.Scheme == "https" && u.Host != ""
}

// OpenIDConfiguration returns the JSON of the OpenID Provider
// configuration: the issuer, where the keys are, and the algorithms of
// the keys that verify tokens now.
func (t *Tokens) OpenIDConfiguration() ([]byte, error) {
	return json.Marshal(openIDConfig{
		Issuer:        t.cfg.Issuer,
		JWKSURI:       t.cfg.JWKSURI,
		ResponseTypes: []string{"id_token"},
		SubjectTypes:  []string{"public"},
		SigningAlgs:   t.keys.current().algs,
	})
}

// JWKS returns the JSON Web Key Set of every key that verifies tokens
// now, each with its kid (KeyID), "use": "sig" and its algorithm.
func (t *Tokens) JWKS() []byte { return t.keys.current().jwks }
