package app

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/rbac"
)

// The follower applies each change of a kind to the policy it publishes:
// added, changed and removed Roles and bindings decide the next request,
// and no policy is published before every kind has been read.
func TestRBACFollowerAppliesChanges(t *testing.T) {
	f := newRBACFollower(4)
	alice := identity.User{Name: "alice"}
	allowed := func(ns string) bool {
		t.Helper()
		ok, _ := f.authz.Allowed(t.Context(), rbac.Attributes{User: alice, Verb: "get", ResourceRequest: true, Resource: "configmaps", Namespace: ns})
		return ok
	}
	role := func(ns string, verbs ...string) *rbacv1.Role {
		return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "read"},
			Rules: []rbacv1.PolicyRule{{Verbs: verbs, APIGroups: []string{""}, Resources: []string{"configmaps"}}}}
	}
	binding := func(ns string) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "alice-reads"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}}
	}
	roleA, roleB := role("a", "get"), role("b", "get")
	bindingA, bindingB := binding("a"), binding("b")

	f.changed("roles", []runtime.Object{roleA, roleB})
	f.changed("rolebindings", []runtime.Object{bindingA})
	f.changed("clusterroles", nil)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	if err := f.authz.WaitSynced(ctx); err == nil {
		t.Fatal("a policy was published before every kind was read")
	}
	cancel()
	f.changed("clusterrolebindings", nil)
	if !allowed("a") || allowed("b") {
		t.Fatalf("first policy: a %v b %v, want true false", allowed("a"), allowed("b"))
	}

	// A binding added in b, the same objects of a left as they were.
	f.changed("rolebindings", []runtime.Object{bindingA, bindingB})
	if !allowed("a") || !allowed("b") {
		t.Fatalf("after adding b's binding: a %v b %v, want true true", allowed("a"), allowed("b"))
	}
	// b's Role changed (a new object, as the cache stores a change).
	f.changed("roles", []runtime.Object{roleA, role("b", "list")})
	if !allowed("a") || allowed("b") {
		t.Fatalf("after b's role lost get: a %v b %v, want true false", allowed("a"), allowed("b"))
	}
	// a's binding removed.
	f.changed("rolebindings", []runtime.Object{bindingB})
	if allowed("a") {
		t.Fatal("alice still reads a after its binding was removed")
	}
	// A ClusterRoleBinding to a ClusterRole grants every namespace; its
	// removal takes that back.
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "reader"},
		Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}}}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-reads-all"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}}}
	f.changed("clusterroles", []runtime.Object{cr})
	f.changed("clusterrolebindings", []runtime.Object{crb})
	if !allowed("a") || !allowed("c") {
		t.Fatalf("with a cluster binding: a %v c %v, want true true", allowed("a"), allowed("c"))
	}
	f.changed("clusterrolebindings", nil)
	if allowed("a") || allowed("c") {
		t.Fatalf("cluster binding removed: a %v c %v, want false false", allowed("a"), allowed("c"))
	}
}

// BenchmarkRBACChange measures what one changed RoleBinding costs the
// admission service's authorizer, with 1,000 namespaces of one Role and
// one RoleBinding each: rebuild builds the whole policy anew from every
// object (what the service did on each change), incremental applies the
// change to the follower's last policy.
func BenchmarkRBACChange(b *testing.B) {
	const namespaces = 1000
	var roles, bindings []runtime.Object
	for i := range namespaces {
		ns := fmt.Sprint("ns-", i)
		roles = append(roles, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "read"},
			Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}}})
		bindings = append(bindings, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "read"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: fmt.Sprint("user-", i)}}})
	}
	// changed returns bindings with the i-th replaced by a new object, as
	// the cache holds them after a change of that binding.
	changed := func(i int) []runtime.Object {
		out := slices.Clone(bindings)
		c := out[i%namespaces].(*rbacv1.RoleBinding).DeepCopy()
		c.Subjects[0].Name += "x"
		out[i%namespaces] = c
		return out
	}
	b.Run("rebuild", func(b *testing.B) {
		authz := rbac.New()
		i := 0
		for b.Loop() {
			o := rbac.NewObjects()
			for _, obj := range roles {
				o.Put(obj)
			}
			for _, obj := range changed(i) {
				o.Put(obj)
			}
			authz.Publish(o, 0, true)
			i++
		}
	})
	b.Run("incremental", func(b *testing.B) {
		f := newRBACFollower(4)
		f.changed("roles", roles)
		f.changed("rolebindings", bindings)
		f.changed("clusterroles", nil)
		f.changed("clusterrolebindings", nil)
		i := 0
		for b.Loop() {
			f.changed("rolebindings", changed(i))
			i++
		}
	})
}
