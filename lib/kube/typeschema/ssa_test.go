package typeschema

import (
	"slices"
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/registry"
)

// TestSSASchemas: the served kinds' definitions carry kube-apiserver's
// server-side apply markers: a ConfigMap's definition names its kind;
// owner references are a list keyed by uid of atomic structs, finalizers
// a set, a ServiceAccount's imagePullSecrets an atomic list, a
// ClusterRoleBinding's roleRef an atomic struct.
func TestSSASchemas(t *testing.T) {
	defs, err := SSASchemas(registry.New(registry.Standard()...))
	if err != nil {
		t.Fatal(err)
	}
	def := func(name string) map[string]any {
		t.Helper()
		d, ok := defs[name]
		if !ok {
			t.Fatalf("no definition %s", name)
		}
		return d.Extensions
	}
	gvks, _ := def("io.k8s.api.core.v1.ConfigMap")["x-kubernetes-group-version-kind"].([]any)
	if len(gvks) != 1 || gvks[0].(map[string]any)["kind"] != "ConfigMap" {
		t.Errorf("ConfigMap's group-version-kinds %v", gvks)
	}
	meta := defs["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]
	if meta == nil {
		t.Fatal("no ObjectMeta definition")
	}
	owners := meta.Properties["ownerReferences"].Extensions
	if owners["x-kubernetes-list-type"] != "map" || !slices.Equal(toStrings(owners["x-kubernetes-list-map-keys"]), []string{"uid"}) {
		t.Errorf("ownerReferences: %v, want a map list keyed by uid", owners)
	}
	if lt := meta.Properties["finalizers"].Extensions["x-kubernetes-list-type"]; lt != "set" {
		t.Errorf("finalizers: list type %v, want set", lt)
	}
	if mt := def("io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference")["x-kubernetes-map-type"]; mt != "atomic" {
		t.Errorf("OwnerReference: map type %v, want atomic", mt)
	}
	if lt := defs["io.k8s.api.core.v1.ServiceAccount"].Properties["imagePullSecrets"].Extensions["x-kubernetes-list-type"]; lt != "atomic" {
		t.Errorf("imagePullSecrets: list type %v, want atomic", lt)
	}
	if mt := def("io.k8s.api.rbac.v1.RoleRef")["x-kubernetes-map-type"]; mt != "atomic" {
		t.Errorf("RoleRef: map type %v, want atomic", mt)
	}
	if _, err := NewTypeConverter(registry.New(registry.Standard()...)); err != nil {
		t.Errorf("NewTypeConverter: %v", err)
	}
}

func toStrings(v any) []string {
	var out []string
	items, _ := v.([]any)
	for _, i := range items {
		s, _ := i.(string)
		out = append(out, s)
	}
	return out
}
