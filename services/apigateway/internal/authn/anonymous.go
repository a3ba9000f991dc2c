package authn

import "strings"

// AnonymousPolicy is what becomes of a request that presents no
// credentials (kube-apiserver's --anonymous-auth, with the authorizer it
// goes to). A request with an invalid bearer token or client certificate
// is never anonymous: it is refused (401) whatever the policy.
type AnonymousPolicy int

const (
	// AnonymousPublic: the caller is system:anonymous on the public
	// paths (PublicPath) and is refused (401) everywhere else. It is the
	// zero value, and the policy of --anonymous-auth under the AlwaysAllow
	// authorization mode, which would otherwise open the whole API to
	// anyone.
	AnonymousPublic AnonymousPolicy = iota
	// AnonymousAuthorized: the caller is system:anonymous, in
	// system:unauthenticated, and the authorizer decides every request as
	// any user's (RBAC lets it read the public paths through
	// system:public-info-viewer and answers 403 elsewhere), as
	// kube-apiserver does with --anonymous-auth=true.
	AnonymousAuthorized
	// AnonymousRefused: every request without credentials is refused
	// (401), as with kube-apiserver's --anonymous-auth=false.
	AnonymousRefused
)

// Admits reports whether an anonymous request for path goes on, as
// system:anonymous, to the authorizer.
func (p AnonymousPolicy) Admits(path string) bool {
	switch p {
	case AnonymousAuthorized:
		return true
	case AnonymousPublic:
		return PublicPath(path)
	default:
		return false
	}
}

// PublicPath reports whether p is one of the paths kube-apiserver's
// system:public-info-viewer role lets everyone read: the health endpoints
// (and their checks) and /version.
func PublicPath(p string) bool {
	for _, pre := range []string{"/healthz", "/livez", "/readyz"} {
		if p == pre || strings.HasPrefix(p, pre+"/") {
			return true
		}
	}
	return p == "/version" || p == "/version/"
}
