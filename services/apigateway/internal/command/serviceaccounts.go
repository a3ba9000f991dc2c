package command

import (
	"flag"
	"strings"
	"time"

	"github.com/meridian-cp/meridian/services/apigateway/app"
)

// saFlags are kube-apiserver's service account token flags.
type saFlags struct {
	issuer, signingKeyFile, jwksURI, apiAudiences string
	keyFiles                                      listFlag
	maxExpiration                                 time.Duration
}

func (f *saFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&f.issuer, "service-account-issuer", "", "the \"iss\" of service account tokens (e.g. https://kubernetes.default.svc); an https URL also serves /.well-known/openid-configuration and /openid/v1/jwks; empty: no service account tokens")
	fs.StringVar(&f.signingKeyFile, "service-account-signing-key-file", "", "PEM private key (RSA or ECDSA) that signs new service account tokens (TokenRequest), read again within 5s when it changes")
	fs.Var(&f.keyFiles, "service-account-key-file", "PEM file of public keys (or private keys, or certificates) that verify service account tokens and are listed in the JWKS; repeatable; read again within 5s when it changes")
	fs.DurationVar(&f.maxExpiration, "service-account-max-token-expiration", 0, "the longest lifetime a TokenRequest gets (longer requests are cut to it); 0: 2^32 seconds")
	fs.StringVar(&f.jwksURI, "service-account-jwks-uri", "", "jwks_uri of the discovery document; empty: the issuer followed by /openid/v1/jwks")
	fs.StringVar(&f.apiAudiences, "api-audiences", "", "comma-separated audiences of the API: tokens must name one; new tokens get them by default; empty: the issuer")
}

func (f *saFlags) config() app.ServiceAccountConfig {
	c := app.ServiceAccountConfig{
		Issuer: f.issuer, SigningKeyFile: f.signingKeyFile, KeyFiles: f.keyFiles,
		MaxTokenExpiration: f.maxExpiration, JWKSURI: f.jwksURI,
	}
	for _, a := range strings.Split(f.apiAudiences, ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.APIAudiences = append(c.APIAudiences, a)
		}
	}
	return c
}

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
}
