package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authn/serviceaccount"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
)

// ServiceAccountConfig configures service account tokens, with
// kube-apiserver's flags. An empty Issuer turns them off.
type ServiceAccountConfig struct {
	// Issuer is the tokens' "iss" (--service-account-issuer); an https
	// URL also serves the OpenID discovery documents.
	Issuer string
	// SigningKeyFile is the PEM private key that signs new tokens
	// (--service-account-signing-key-file); empty: tokens are verified,
	// none issued.
	SigningKeyFile string
	// KeyFiles hold the public keys that verify tokens
	// (--service-account-key-file, repeatable).
	KeyFiles []string
	// MaxTokenExpiration caps the lifetime of new tokens
	// (--service-account-max-token-expiration); 0: no cap but 2^32 s.
	MaxTokenExpiration time.Duration
	// JWKSURI overrides the discovery document's jwks_uri
	// (--service-account-jwks-uri).
	JWKSURI string
	// APIAudiences are the audiences the API accepts (--api-audiences);
	// empty means Issuer.
	APIAudiences []string
}

// validate reports the problems of c.
func (c ServiceAccountConfig) validate() error {
	if c.Issuer == "" {
		if c.SigningKeyFile != "" || len(c.KeyFiles) > 0 {
			return errors.New("apigateway: service account key files need an issuer (--service-account-issuer)")
		}
		return nil
	}
	if c.SigningKeyFile == "" && len(c.KeyFiles) == 0 {
		return errors.New("apigateway: --service-account-issuer needs --service-account-signing-key-file or --service-account-key-file")
	}
	return nil
}

// newServiceAccountTokens builds the service account token issuer and
// verifier, and starts the index of the objects tokens name (until bg
// ends); nil when tokens are off. It waits until the index has read the
// store, so that the gateway refuses no valid token once it serves.
func (a *App) newServiceAccountTokens(ctx, bg context.Context, store *storage.Store, c *codec.Codec, reg *registry.Registry) (*serviceaccount.Tokens, error) {
	sa := a.cfg.ServiceAccounts
	if sa.Issuer == "" {
		return nil, nil
	}
	index, err := serviceaccount.NewIndex(store, c, reg, a.cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("apigateway: %w", err)
	}
	tokens, err := serviceaccount.New(serviceaccount.Config{
		Issuer: sa.Issuer, APIAudiences: sa.APIAudiences, SigningKeyFile: sa.SigningKeyFile, KeyFiles: sa.KeyFiles,
		MaxExpiration: sa.MaxTokenExpiration, JWKSURI: sa.JWKSURI,
		Objects: index, Store: store, Codec: c, Registry: reg, Logger: a.cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("apigateway: %w", err)
	}
	a.background(bg, index.Run)
	wait, cancel := context.WithTimeout(ctx, policySyncTimeout)
	defer cancel()
	if err := index.WaitSynced(wait); err != nil {
		return nil, fmt.Errorf("apigateway: %w", err)
	}
	return tokens, nil
}
