package registry

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestRESTMapper: kinds and resources map both ways over what the
// registry serves, partial resources match any group or version, and an
// unserved resource or kind is a NoMatch error.
func TestRESTMapper(t *testing.T) {
	m := NewRESTMapper(New(Standard()...))
	roles := schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}
	if k, err := m.KindFor(roles); err != nil || k != (schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "Role"}) {
		t.Errorf("KindFor(roles) = %v, %v", k, err)
	}
	if r, err := m.ResourceFor(schema.GroupVersionResource{Resource: "configmaps"}); err != nil || r != (schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}) {
		t.Errorf("ResourceFor(configmaps) = %v, %v", r, err)
	}
	if _, err := m.KindsFor(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}); !meta.IsNoMatchError(err) {
		t.Errorf("KindsFor(widgets) error %v, want NoMatch", err)
	}
	mp, err := m.RESTMapping(schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "Role"})
	if err != nil || mp.Resource != roles || mp.Scope.Name() != meta.RESTScopeNameNamespace {
		t.Errorf("RESTMapping(Role) = %+v, %v", mp, err)
	}
	if mp, err := m.RESTMapping(schema.GroupKind{Kind: "Namespace"}, "v1"); err != nil || mp.Scope.Name() != meta.RESTScopeNameRoot {
		t.Errorf("RESTMapping(Namespace) = %+v, %v", mp, err)
	}
	if _, err := m.RESTMapping(schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "Role"}, "v1beta1"); !meta.IsNoMatchError(err) {
		t.Errorf("RESTMapping(Role, v1beta1) error %v, want NoMatch", err)
	}
	if s, err := m.ResourceSingularizer("roles"); err != nil || s != "role" {
		t.Errorf("ResourceSingularizer(roles) = %q, %v", s, err)
	}
}
