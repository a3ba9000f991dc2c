package crd

import (
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func newCRD(name, group, plural, kind string, created time.Time) *apiextensionsv1.CustomResourceDefinition {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	crd.Name = name
	crd.CreationTimestamp = metav1.NewTime(created)
	crd.Spec.Group = group
	crd.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: kind}
	crd.Spec.Versions = []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true}}
	return crd
}

func condition(st apiextensionsv1.CustomResourceDefinitionStatus, t apiextensionsv1.CustomResourceDefinitionConditionType) apiextensionsv1.CustomResourceDefinitionCondition {
	for _, c := range st.Conditions {
		if c.Type == t {
			return c
		}
	}
	return apiextensionsv1.CustomResourceDefinitionCondition{}
}

// TestStatus: a CRD's names are accepted (with defaults) and it is
// established; of two CRDs asking for one plural the older gets it and
// the other reports PluralConflict; a kind clashing with a built-in
// resource of the group is refused; a deleted CRD is Terminating.
func TestStatus(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a := newCRD("widgets.example.com", "example.com", "widgets", "Widget", t0)
	b := newCRD("widgets2.example.com", "example.com", "widgets", "Gizmo", t0.Add(time.Second))
	crds := map[string]*apiextensionsv1.CustomResourceDefinition{a.Name: a, b.Name: b}

	st := Status(a, crds, nil)
	if c := condition(st, apiextensionsv1.NamesAccepted); c.Status != apiextensionsv1.ConditionTrue || c.Reason != "NoConflicts" {
		t.Errorf("NamesAccepted = %+v", c)
	}
	if c := condition(st, apiextensionsv1.Established); c.Status != apiextensionsv1.ConditionTrue {
		t.Errorf("Established = %+v", c)
	}
	if n := st.AcceptedNames; n.Singular != "widget" || n.ListKind != "WidgetList" || n.Plural != "widgets" {
		t.Errorf("acceptedNames = %+v", n)
	}
	if len(st.StoredVersions) != 1 || st.StoredVersions[0] != "v1" {
		t.Errorf("storedVersions = %v", st.StoredVersions)
	}

	stB := Status(b, crds, nil)
	if c := condition(stB, apiextensionsv1.NamesAccepted); c.Status != apiextensionsv1.ConditionFalse || c.Reason != "PluralConflict" || c.Message != `"widgets" is already in use` {
		t.Errorf("the younger CRD's NamesAccepted = %+v", c)
	}
	if c := condition(stB, apiextensionsv1.Established); c.Status != apiextensionsv1.ConditionFalse {
		t.Errorf("the younger CRD is established: %+v", c)
	}
	// Once a's names are accepted, b stays refused whatever the order.
	a.Status = st
	if c := condition(Status(b, crds, nil), apiextensionsv1.NamesAccepted); c.Reason != "PluralConflict" {
		t.Errorf("after a is accepted, b: %+v", c)
	}

	lease := newCRD("leases.coordination.k8s.io", "coordination.k8s.io", "myleases", "Lease", t0)
	lease.Spec.Names.Singular = "mylease"
	builtin := []*registry.Resource{registry.Leases()}
	if c := condition(Status(lease, nil, builtin), apiextensionsv1.NamesAccepted); c.Reason != "KindConflict" {
		t.Errorf("a kind of a built-in resource: %+v", c)
	}

	now := metav1.NewTime(t0)
	a.DeletionTimestamp = &now
	if c := condition(Status(a, crds, nil), apiextensionsv1.Terminating); c.Status != apiextensionsv1.ConditionTrue || c.Reason != "InstanceDeletionInProgress" {
		t.Errorf("Terminating = %+v", c)
	}
}
