package fieldmanager

import (
	"slices"
	"strings"
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// twoVersionCRD is a CRD served at v1 (stored) and v1beta1 with
// conversion None.
func twoVersionCRD() *apiextensionsv1.CustomResourceDefinition {
	schema := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
		"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"size": {Type: "string"}, "color": {Type: "string"}}},
	}}}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	crd.Name = "widgets.example.com"
	crd.Spec.Group = "example.com"
	crd.Spec.Scope = apiextensionsv1.NamespaceScoped
	crd.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"}
	crd.Spec.Versions = []apiextensionsv1.CustomResourceDefinitionVersion{
		{Name: "v1", Served: true, Storage: true, Schema: schema},
		{Name: "v1beta1", Served: true, Schema: schema},
	}
	crd.Status.AcceptedNames = crd.Spec.Names
	crd.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}}
	return crd
}

// widgetAt returns the Kind of the CRD's version and an object of it.
func widgetAt(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition, version, spec string) (*Kind, *unstructured.Unstructured) {
	t.Helper()
	for _, res := range registry.CustomResources(crd) {
		if res.GVK().Version != version {
			continue
		}
		k, err := ForKind(res, nil)
		if err != nil || k.deduced {
			t.Fatalf("ForKind(%s): %v, deduced %v", version, err, k != nil && k.deduced)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON([]byte(`{"apiVersion":"example.com/` + version + `","kind":"Widget","metadata":{"name":"w","namespace":"demo"},"spec":` + spec + `}`)); err != nil {
			t.Fatal(err)
		}
		return k, u
	}
	t.Fatalf("no resource of version %s", version)
	return nil, nil
}

// owners renders managedFields as "manager@apiVersion:fieldsV1" lines,
// sorted. managedFields itself is ordered by operation, then by the
// second of each entry's time, then by manager: two updates in one test
// are in either order depending on whether a second boundary fell
// between them, and the order is not what these tests check.
func owners(entries []metav1.ManagedFieldsEntry) string {
	var out []string
	for _, e := range entries {
		out = append(out, e.Manager+"@"+e.APIVersion+":"+string(e.FieldsV1.Raw))
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// TestCRDManagedFieldsAcrossVersions: as kube-apiserver, a write through
// v1 is compared with the fields a manager owns at v1beta1 by converting
// the object to v1beta1: the field it changes moves to the new manager,
// the other stays with the old one (whose entry keeps its apiVersion), and
// an apply of that field without force conflicts with the old manager.
func TestCRDManagedFieldsAcrossVersions(t *testing.T) {
	crd := twoVersionCRD()
	beta, created := widgetAt(t, crd, "v1beta1", `{"size":"S","color":"red"}`)
	_, betaEmpty := widgetAt(t, crd, "v1beta1", `{}`)
	delete(betaEmpty.Object, "spec")
	live := beta.Update("", betaEmpty, created, "old-client").(*unstructured.Unstructured)
	if got := owners(live.GetManagedFields()); got != `old-client@example.com/v1beta1:{"f:spec":{".":{},"f:color":{},"f:size":{}}}` {
		t.Fatalf("after the v1beta1 create, managedFields:\n%s", got)
	}

	// The stored object read through v1 (conversion None).
	v1, _ := widgetAt(t, crd, "v1", `{}`)
	liveV1 := live.DeepCopy()
	liveV1.SetAPIVersion("example.com/v1")
	updated := liveV1.DeepCopy()
	if err := unstructured.SetNestedField(updated.Object, "L", "spec", "size"); err != nil {
		t.Fatal(err)
	}
	out := v1.Update("", liveV1, updated, "new-client").(*unstructured.Unstructured)
	want := `new-client@example.com/v1:{"f:spec":{"f:size":{}}}` + "\n" +
		`old-client@example.com/v1beta1:{"f:spec":{".":{},"f:color":{}}}`
	if got := owners(out.GetManagedFields()); got != want {
		t.Errorf("after a v1 update of spec.size, managedFields:\n%s\nwant:\n%s", got, want)
	}

	_, patch := widgetAt(t, crd, "v1", `{"color":"blue"}`)
	delete(patch.Object["metadata"].(map[string]any), "namespace")
	_, err := v1.Apply("", liveV1, patch, "applier", false)
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), `conflict with "old-client"`) || !strings.Contains(err.Error(), ".spec.color") {
		t.Errorf("apply of spec.color through v1 over old-client's v1beta1 entry: %v, want a conflict with old-client", err)
	}
}
