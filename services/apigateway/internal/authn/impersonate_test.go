package authn

import (
	"errors"
	"net/http"
	"reflect"
	"testing"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authz"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestImpersonate: the user a request acts as, with kube-apiserver's
// rules; each thing impersonated (user or service account, groups, extra
// values, uid) needs the "impersonate" verb on it, which members of
// system:masters hold and carol holds for some things only.
func TestImpersonate(t *testing.T) {
	admin := identity.User{Name: "admin", Groups: []string{MastersGroup, AuthenticatedGroup}}
	alice := identity.User{Name: "alice", Groups: []string{"dev", AuthenticatedGroup}}
	carol := identity.User{Name: "carol", Groups: []string{AuthenticatedGroup}}
	az := authz.NewStatic(
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "impersonator"}, Rules: []rbacv1.PolicyRule{
			{Verbs: []string{"impersonate"}, APIGroups: []string{""}, Resources: []string{"users"}, ResourceNames: []string{"bob"}},
			{Verbs: []string{"impersonate"}, APIGroups: []string{""}, Resources: []string{"groups"}, ResourceNames: []string{"ops"}},
			{Verbs: []string{"impersonate"}, APIGroups: []string{""}, Resources: []string{"serviceaccounts"}},
			{Verbs: []string{"impersonate"}, APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"userextras/scopes"}, ResourceNames: []string{"view"}},
		}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "carol"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "impersonator"},
			Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: "carol"}}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "carol"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "impersonator"},
			Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: "carol"}}},
	)
	header := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}
	for _, tc := range []struct {
		name      string
		requestor identity.User
		h         http.Header
		want      identity.User
		ok        bool
		code      int32
		message   string
	}{
		{name: "no headers", requestor: alice, h: header("Accept", "application/json")},
		{name: "an empty user header asks for nothing", requestor: alice, h: header("Impersonate-User", "")},
		{name: "a user", requestor: admin, h: header("Impersonate-User", "bob"), ok: true,
			want: identity.User{Name: "bob", Groups: []string{AuthenticatedGroup}}},
		{name: "everything", requestor: admin, ok: true,
			h: header("Impersonate-User", "bob", "Impersonate-Group", "ops", "Impersonate-Group", "dev", "Impersonate-Uid", "uid-bob",
				"Impersonate-Extra-Scopes", "view", "Impersonate-Extra-Scopes", "edit", "Impersonate-Extra-Example.com%2fteam", "a"),
			want: identity.User{Name: "bob", UID: "uid-bob", Groups: []string{"ops", "dev", AuthenticatedGroup},
				Extra: map[string][]string{"scopes": {"view", "edit"}, "example.com/team": {"a"}}}},
		{name: "named authentication groups are kept as they are", requestor: admin, ok: true,
			h:    header("Impersonate-User", "bob", "Impersonate-Group", UnauthenticatedGroup),
			want: identity.User{Name: "bob", Groups: []string{UnauthenticatedGroup}}},
		{name: "a service account brings its groups", requestor: admin, ok: true,
			h:    header("Impersonate-User", "system:serviceaccount:ns:builder"),
			want: identity.User{Name: "system:serviceaccount:ns:builder", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:ns", AuthenticatedGroup}}},
		{name: "named groups replace a service account's", requestor: admin, ok: true,
			h:    header("Impersonate-User", "system:serviceaccount:ns:builder", "Impersonate-Group", "ops"),
			want: identity.User{Name: "system:serviceaccount:ns:builder", Groups: []string{"ops", AuthenticatedGroup}}},
		{name: "the anonymous user", requestor: admin, ok: true, h: header("Impersonate-User", AnonymousUser),
			want: identity.User{Name: AnonymousUser, Groups: []string{UnauthenticatedGroup}}},
		{name: "a group without a user", requestor: admin, h: header("Impersonate-Group", "ops"), code: 400,
			message: `requested group "ops" without impersonating a user`},
		{name: "a uid and extra without a user", requestor: alice, h: header("Impersonate-Uid", "u", "Impersonate-Extra-Scopes", "view"), code: 400,
			message: `requested extra "scopes", uid "u" without impersonating a user`},
		{name: "not a master", requestor: alice, h: header("Impersonate-User", "bob", "Impersonate-Group", MastersGroup), code: 403,
			message: `users "bob" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope`},
		{name: "not a master, a service account", requestor: alice, h: header("Impersonate-User", "system:serviceaccount:ns:builder"), code: 403,
			message: `serviceaccounts "builder" is forbidden: User "alice" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "ns"`},
		{name: "anonymous", requestor: Anonymous(), h: header("Impersonate-User", "bob"), code: 403,
			message: `users "bob" is forbidden: User "system:anonymous" cannot impersonate resource "users" in API group "" at the cluster scope`},
		{name: "granted a user, a group and an extra value", requestor: carol, ok: true,
			h:    header("Impersonate-User", "bob", "Impersonate-Group", "ops", "Impersonate-Extra-Scopes", "view"),
			want: identity.User{Name: "bob", Groups: []string{"ops", AuthenticatedGroup}, Extra: map[string][]string{"scopes": {"view"}}}},
		{name: "granted service accounts", requestor: carol, ok: true, h: header("Impersonate-User", "system:serviceaccount:ns:builder"),
			want: identity.User{Name: "system:serviceaccount:ns:builder", Groups: []string{"system:serviceaccounts", "system:serviceaccounts:ns", AuthenticatedGroup}}},
		{name: "a user not granted", requestor: carol, h: header("Impersonate-User", "dave"), code: 403,
			message: `users "dave" is forbidden: User "carol" cannot impersonate resource "users" in API group "" at the cluster scope`},
		{name: "a group not granted", requestor: carol, h: header("Impersonate-User", "bob", "Impersonate-Group", "ops", "Impersonate-Group", MastersGroup), code: 403,
			message: `groups "system:masters" is forbidden: User "carol" cannot impersonate resource "groups" in API group "" at the cluster scope`},
		{name: "an extra value not granted", requestor: carol, h: header("Impersonate-User", "bob", "Impersonate-Extra-Scopes", "edit"), code: 403,
			message: `userextras.authentication.k8s.io "edit" is forbidden: User "carol" cannot impersonate resource "userextras/scopes" in API group "authentication.k8s.io" at the cluster scope`},
		{name: "a uid not granted", requestor: carol, h: header("Impersonate-User", "bob", "Impersonate-Uid", "uid-bob"), code: 403,
			message: `uids.authentication.k8s.io "uid-bob" is forbidden: User "carol" cannot impersonate resource "uids" in API group "authentication.k8s.io" at the cluster scope`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := Impersonate(t.Context(), az, tc.requestor, tc.h)
			if tc.code != 0 {
				var se *apierrors.StatusError
				if !errors.As(err, &se) || se.ErrStatus.Code != tc.code || se.ErrStatus.Message != tc.message || ok {
					t.Fatalf("got %+v %v %v, want a %d: %s", got, ok, err, tc.code, tc.message)
				}
				return
			}
			if err != nil || ok != tc.ok || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v %v %v, want %+v %v", got, ok, err, tc.want, tc.ok)
			}
		})
	}
}
