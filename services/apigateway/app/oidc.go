package app

import (
	"context"
	"fmt"

	"github.com/meridian-cp/meridian/services/apigateway/internal/authn/oidc"
)

// OIDCOptions configure OIDC authentication (Config.OIDC), as
// kube-apiserver's --oidc-* flags; AddFlags defines those flags.
type OIDCOptions = oidc.Options

// newOIDC returns the OIDC authenticator when Config.OIDC names an issuer
// (nil otherwise), and fetches the issuer's keys in the background until
// bg ends. The gateway starts whether or not the issuer answers: its ID
// tokens are accepted once it does.
func (a *App) newOIDC(bg context.Context) (*oidc.Authenticator, error) {
	if !a.cfg.OIDC.Enabled() {
		return nil, nil
	}
	o, err := oidc.New(oidc.Config{Options: a.cfg.OIDC, Logger: a.cfg.Logger})
	if err != nil {
		return nil, fmt.Errorf("apigateway: %w", err)
	}
	a.background(bg, o.Run)
	a.log.Info("OIDC authentication configured", "issuer", a.cfg.OIDC.IssuerURL, "client-id", a.cfg.OIDC.ClientID)
	return o, nil
}
