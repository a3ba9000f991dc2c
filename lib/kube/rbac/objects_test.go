package rbac_test

import (
	"encoding/json"
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/rbac"
	"github.com/meridian-cp/meridian/lib/kube/rbac/rbactest"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestObjectsApply: objects applied by store key are granted once
// published, a published policy is built on the last one (a deletion
// revokes), a value that does not decode grants nothing, and a fresh
// publish forgets what the Objects no longer hold.
func TestObjectsApply(t *testing.T) {
	decode := func(value []byte, _ int64, obj runtime.Object) error { return json.Unmarshal(value, obj) }
	put := func(o *rbac.Objects, key string, obj any) {
		t.Helper()
		js, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		if err := o.Apply(rbac.KeyPrefix+key, js, 1, decode); err != nil {
			t.Fatal(err)
		}
	}
	get := rbactest.In(rbactest.ResourceRequest("get", "", "configmaps", "", "x"), rbactest.Who("alice"), "team")
	allowed := func(r *rbac.RBAC) bool {
		ok, _ := r.Allowed(t.Context(), get)
		return ok
	}

	r := rbac.New()
	o := rbac.NewObjects()
	put(o, "roles/team/reader", rbactest.Role("team", "reader", rbactest.Rule(rbactest.S("get"), rbactest.S(""), rbactest.S("configmaps"))))
	put(o, "rolebindings/team/alice", rbactest.RoleBinding("team", "alice", "Role", "reader", "User:alice"))
	put(o, "other/ignored", map[string]string{"kind": "nothing"})
	r.Publish(o, 7, true)
	if !allowed(r) || r.Revision() != 7 {
		t.Fatalf("after the first publish: allowed %v, revision %d", allowed(r), r.Revision())
	}

	if err := o.Apply(rbac.KeyPrefix+"rolebindings/team/alice", nil, 8, decode); err != nil {
		t.Fatal(err)
	}
	r.Publish(o, 8, false)
	if allowed(r) {
		t.Fatal("allowed after the binding was deleted")
	}

	put(o, "rolebindings/team/alice", rbactest.RoleBinding("team", "alice", "Role", "reader", "User:alice"))
	r.Publish(o, 9, false)
	if !allowed(r) {
		t.Fatal("refused after the binding was created again")
	}
	if err := o.Apply(rbac.KeyPrefix+"roles/team/reader", []byte("{not json"), 10, decode); err == nil {
		t.Fatal("a value that does not decode: no error")
	}
	r.Publish(o, 10, false)
	if allowed(r) {
		t.Fatal("a role that does not decode still grants")
	}

	r.Publish(rbac.NewObjects(), 11, true)
	if ok, _ := r.Allowed(t.Context(), rbactest.In(get, rbactest.Who("root", rbac.MastersGroup), "team")); !ok || allowed(r) {
		t.Fatal("an empty policy: system:masters refused or alice allowed")
	}
}
