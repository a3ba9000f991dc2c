package authz

import (
	"testing"

	"github.com/meridian-cp/meridian/lib/identity"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestExplain: an allowed decision names the binding, as kube-apiserver's
// RBAC reason; system:masters and denials are Allowed's.
func TestExplain(t *testing.T) {
	r := NewStatic(
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "reader"},
			Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "alice-reads"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "reader"},
			Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: "alice"}}},
	)
	ctx := t.Context()
	get := func(u identity.User, ns string) Attributes {
		return ForResource(u, "get", "", "v1", "configmaps", "", ns, "cm", "")
	}
	alice := identity.User{Name: "alice"}
	if ok, reason := Explain(ctx, r, get(alice, "team")); !ok || reason != `RBAC: allowed by RoleBinding "alice-reads/team" of Role "reader" to User "alice"` {
		t.Errorf("alice in team: %v %q", ok, reason)
	}
	if ok, reason := Explain(ctx, r, get(alice, "other")); ok || reason != "" {
		t.Errorf("alice elsewhere: %v %q", ok, reason)
	}
	if ok, reason := Explain(ctx, r, get(identity.User{Name: "root", Groups: []string{MastersGroup}}, "other")); !ok || reason != "" {
		t.Errorf("system:masters: %v %q", ok, reason)
	}
	if ok, reason := Explain(ctx, AlwaysAllow{}, get(alice, "other")); !ok || reason != "" {
		t.Errorf("AlwaysAllow: %v %q", ok, reason)
	}
}
