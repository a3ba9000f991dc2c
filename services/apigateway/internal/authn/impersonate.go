package authn

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authz"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validation"
)

// Users and groups with a meaning of their own, as kube-apiserver names
// them.
const (
	// MastersGroup is the group whose members may do anything.
	MastersGroup = "system:masters"
	// AnonymousUser is the user of a request that presented no
	// credentials.
	AnonymousUser = "system:anonymous"
	// AuthenticatedGroup holds every authenticated user.
	AuthenticatedGroup = "system:authenticated"
	// UnauthenticatedGroup holds the anonymous user.
	UnauthenticatedGroup = "system:unauthenticated"
	// serviceAccountPrefix starts the user name of a service account:
	// system:serviceaccount:<namespace>:<name>.
	serviceAccountPrefix = "system:serviceaccount:"
)

// Anonymous is the user of a request that presented no credentials, as
// kube-apiserver's anonymous authenticator returns it.
func Anonymous() identity.User {
	return identity.User{Name: AnonymousUser, Groups: []string{UnauthenticatedGroup}}
}

// Authorizer decides whether a requestor may impersonate someone:
// authz.RBAC asks its policy for the "impersonate" verb.
type Authorizer interface {
	Allowed(ctx context.Context, a authz.Attributes) (allowed bool, reason string)
}

// Impersonate returns the user a request acts as, read from its
// Impersonate-* headers with kube-apiserver's rules:
//
//   - Impersonate-User names the user; a service account's user name
//     (system:serviceaccount:<ns>:<name>) brings the service account
//     groups unless Impersonate-Group is given.
//   - Impersonate-Group (repeatable) names the groups, Impersonate-Uid the
//     uid, and Impersonate-Extra-<key> (repeatable; <key> lower-cased and
//     percent-decoded) the extra attributes. Naming any of them without a
//     user is a 400 BadRequest.
//   - The impersonated user is in system:authenticated unless its groups
//     name system:authenticated or system:unauthenticated already (the
//     anonymous user gets system:unauthenticated instead).
//
// ok is false when h asks for no impersonation: the request acts as
// requestor. Each thing impersonated needs the "impersonate" verb, asked
// of az in kube-apiserver's order: the user (resource "users") or service
// account ("serviceaccounts" in its namespace), each group ("groups"),
// each extra value ("userextras/<key>" in authentication.k8s.io) and the
// uid ("uids" in authentication.k8s.io). The first refused gets
// kube-apiserver's 403 Forbidden, naming it. Errors are StatusErrors.
func Impersonate(ctx context.Context, az Authorizer, requestor identity.User, h http.Header) (u identity.User, ok bool, err error) {
	name := h.Get(authenticationv1.ImpersonateUserHeader)
	groups := h.Values(authenticationv1.ImpersonateGroupHeader)
	uid := h.Get(authenticationv1.ImpersonateUIDHeader)
	extra := impersonatedExtra(h)
	if name == "" {
		if len(groups) == 0 && len(extra) == 0 && uid == "" {
			return identity.User{}, false, nil
		}
		return identity.User{}, false, apierrors.NewBadRequest(fmt.Sprintf(
			"requested %s without impersonating a user", describeImpersonation(groups, extra, uid)))
	}
	ns, sa, isServiceAccount := splitServiceAccount(name)
	for _, target := range impersonationTargets(name, ns, sa, isServiceAccount, groups, extra, uid) {
		target.User, target.Verb, target.ResourceRequest = requestor, "impersonate", true
		if allowed, reason := az.Allowed(ctx, target); !allowed {
			return identity.User{}, false, authz.Forbidden(target, reason)
		}
	}
	u = identity.User{Name: name, UID: uid, Extra: extra}
	if len(groups) > 0 {
		u.Groups = slices.Clone(groups)
	} else if isServiceAccount {
		u.Groups = []string{"system:serviceaccounts", "system:serviceaccounts:" + ns}
	}
	switch {
	case name == AnonymousUser && !slices.Contains(u.Groups, UnauthenticatedGroup):
		u.Groups = append(u.Groups, UnauthenticatedGroup)
	case name != AnonymousUser && !slices.Contains(u.Groups, AuthenticatedGroup) && !slices.Contains(u.Groups, UnauthenticatedGroup):
		u.Groups = append(u.Groups, AuthenticatedGroup)
	}
	return u, true, nil
}

// impersonationTargets are what a request impersonates, each as the
// resource its "impersonate" permission is on, in kube-apiserver's order.
func impersonationTargets(name, ns, sa string, isServiceAccount bool, groups []string, extra map[string][]string, uid string) []authz.Attributes {
	var targets []authz.Attributes
	if isServiceAccount {
		targets = append(targets, authz.Attributes{Resource: "serviceaccounts", Namespace: ns, Name: sa})
	} else {
		targets = append(targets, authz.Attributes{Resource: "users", Name: name})
	}
	for _, g := range groups {
		targets = append(targets, authz.Attributes{Resource: "groups", Name: g})
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range extra[k] {
			targets = append(targets, authz.Attributes{APIGroup: authenticationv1.GroupName, APIVersion: "v1", Resource: "userextras", Subresource: k, Name: v})
		}
	}
	if uid != "" {
		targets = append(targets, authz.Attributes{APIGroup: authenticationv1.GroupName, APIVersion: "v1", Resource: "uids", Name: uid})
	}
	return targets
}

// impersonatedExtra reads the Impersonate-Extra-<key> headers; nil when
// there are none.
func impersonatedExtra(h http.Header) map[string][]string {
	var extra map[string][]string
	for k, values := range h {
		rest, found := strings.CutPrefix(k, authenticationv1.ImpersonateUserExtraHeaderPrefix)
		if !found {
			continue
		}
		key := strings.ToLower(rest)
		if unescaped, err := url.PathUnescape(key); err == nil {
			key = unescaped
		}
		if extra == nil {
			extra = map[string][]string{}
		}
		extra[key] = append(extra[key], values...)
	}
	return extra
}

// describeImpersonation names what a request asked to impersonate, for
// the 400 of a request that named no user.
func describeImpersonation(groups []string, extra map[string][]string, uid string) string {
	var parts []string
	for _, g := range groups {
		parts = append(parts, fmt.Sprintf("group %q", g))
	}
	keys := make([]string, 0, len(extra))
	for k := range extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("extra %q", k))
	}
	if uid != "" {
		parts = append(parts, fmt.Sprintf("uid %q", uid))
	}
	return strings.Join(parts, ", ")
}

// splitServiceAccount reads a service account's user name,
// system:serviceaccount:<namespace>:<name>, with valid namespace and name.
func splitServiceAccount(user string) (namespace, name string, ok bool) {
	rest, found := strings.CutPrefix(user, serviceAccountPrefix)
	if !found {
		return "", "", false
	}
	namespace, name, found = strings.Cut(rest, ":")
	if !found || strings.Contains(name, ":") ||
		len(validation.ValidateNamespaceName(namespace, false)) > 0 ||
		len(validation.ValidateServiceAccountName(name, false)) > 0 {
		return "", "", false
	}
	return namespace, name, true
}
