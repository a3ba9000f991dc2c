package bootstrap

import (
	"context"
	"slices"
	"testing"

	"github.com/meridian-cp/meridian/lib/identity"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/resources/resourcestest"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage/storagetest"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestReconcile: the first start creates every bootstrap object; a later
// start writes nothing when nothing changed, adds back what an object
// lost (rules, subjects, labels) while keeping what was added to it,
// recreates a binding whose role reference was replaced, and leaves alone
// an object annotated autoupdate=false.
func TestReconcile(t *testing.T) {
	api := resourcestest.Start(t)
	ctx := identity.WithUser(context.Background(), identity.User{Name: "system:apiserver", Groups: []string{"system:masters", "system:authenticated"}})
	roles, _ := api.Registry.Lookup(rbacv1.SchemeGroupVersion.WithResource("clusterroles"))
	bindings, _ := api.Registry.Lookup(rbacv1.SchemeGroupVersion.WithResource("clusterrolebindings"))
	role := func(name string) *rbacv1.ClusterRole {
		obj := storagetest.Object(t, api.Store, api.Codec, roles, "", name)
		if obj == nil {
			return nil
		}
		return obj.(*rbacv1.ClusterRole)
	}
	binding := func(name string) *rbacv1.ClusterRoleBinding {
		obj := storagetest.Object(t, api.Store, api.Codec, bindings, "", name)
		if obj == nil {
			return nil
		}
		return obj.(*rbacv1.ClusterRoleBinding)
	}
	update := func(obj runtime.Object, name string, f func(runtime.Object)) {
		t.Helper()
		res := roles
		if _, ok := obj.(*rbacv1.ClusterRoleBinding); ok {
			res = bindings
		}
		ref := &apiv1.ResourceRef{Group: res.GVR.Group, Version: res.GVR.Version, Resource: res.GVR.Resource, Name: name}
		if _, err := api.Server.UpdateObject(ctx, res, ref, func(old runtime.Object) (runtime.Object, error) {
			c := old.DeepCopyObject()
			f(c)
			return c, nil
		}); err != nil {
			t.Fatal(err)
		}
	}

	if err := Reconcile(ctx, api.Registry, api.Server); err != nil {
		t.Fatal(err)
	}
	for _, want := range ClusterRoles() {
		got := role(want.Name)
		if got == nil || got.Labels[BootstrappingLabel] != "rbac-defaults" || got.Annotations[rbacv1.AutoUpdateAnnotationKey] != "true" || len(got.Rules) != len(want.Rules) {
			t.Fatalf("ClusterRole %s: %+v", want.Name, got)
		}
	}
	for _, want := range ClusterRoleBindings() {
		if got := binding(want.Name); got == nil || got.RoleRef != want.RoleRef || len(got.Subjects) != len(want.Subjects) {
			t.Fatalf("ClusterRoleBinding %s: %+v", want.Name, got)
		}
	}
	rev := api.Revision()
	if err := Reconcile(ctx, api.Registry, api.Server); err != nil {
		t.Fatal(err)
	}
	if api.Revision() != rev {
		t.Fatalf("a second reconcile wrote: revision %d, was %d", api.Revision(), rev)
	}

	extra := rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{"example.com"}, Resources: []string{"widgets"}}
	update(role("system:basic-user"), "system:basic-user", func(o runtime.Object) {
		r := o.(*rbacv1.ClusterRole)
		r.Rules = []rbacv1.PolicyRule{extra}
		delete(r.Labels, BootstrappingLabel)
	})
	update(binding("system:discovery"), "system:discovery", func(o runtime.Object) {
		b := o.(*rbacv1.ClusterRoleBinding)
		b.Subjects = []rbacv1.Subject{{Kind: "User", APIGroup: rbacv1.GroupName, Name: "eve"}}
	})
	update(role("system:kube-dns"), "system:kube-dns", func(o runtime.Object) {
		r := o.(*rbacv1.ClusterRole)
		r.Rules = nil
		r.Annotations[rbacv1.AutoUpdateAnnotationKey] = "false"
	})
	if _, err := api.Server.DeleteObject(ctx, bindings, &apiv1.ResourceRef{Group: rbacv1.GroupName, Version: "v1", Resource: "clusterrolebindings", Name: "system:monitoring"}, &metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	replaced := ClusterRoleBindings()[1]
	replaced.RoleRef.Name = "cluster-admin"
	replaced.ResourceVersion = ""
	if _, err := api.Server.CreateObject(ctx, bindings, &replaced); err != nil {
		t.Fatal(err)
	}

	if err := Reconcile(ctx, api.Registry, api.Server); err != nil {
		t.Fatal(err)
	}
	basic := role("system:basic-user")
	if len(basic.Rules) != 4 || !slices.ContainsFunc(basic.Rules, func(r rbacv1.PolicyRule) bool { return r.APIGroups[0] == "example.com" }) || basic.Labels[BootstrappingLabel] != "rbac-defaults" {
		t.Errorf("system:basic-user after reconcile: %+v", basic)
	}
	discovery := binding("system:discovery")
	if len(discovery.Subjects) != 2 || discovery.Subjects[0].Name != "eve" || discovery.Subjects[1].Name != "system:authenticated" {
		t.Errorf("system:discovery after reconcile: %+v", discovery.Subjects)
	}
	if dns := role("system:kube-dns"); len(dns.Rules) != 0 {
		t.Errorf("a protected role was reconciled: %+v", dns)
	}
	if monitoring := binding("system:monitoring"); monitoring.RoleRef.Name != "system:monitoring" {
		t.Errorf("a binding of another role was not recreated: %+v", monitoring.RoleRef)
	}
}
