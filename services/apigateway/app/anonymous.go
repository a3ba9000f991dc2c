package app

import "github.com/meridian-cp/meridian/services/apigateway/internal/authn"

// anonymousPolicy is what becomes of requests without credentials, on both
// APIs: refused (401) with DisableAnonymousAuth; under RBAC, decided as
// system:anonymous like any user's (the public paths through
// system:public-info-viewer, 403 elsewhere), as kube-apiserver's
// --anonymous-auth=true; under AlwaysAllow, admitted to the public paths
// only, so that turning authorization off never opens the API to anyone.
func (a *App) anonymousPolicy() authn.AnonymousPolicy {
	switch {
	case a.cfg.DisableAnonymousAuth:
		return authn.AnonymousRefused
	case a.cfg.AuthorizationMode == AuthorizationAlwaysAllow:
		return authn.AnonymousPublic
	default:
		return authn.AnonymousAuthorized
	}
}
