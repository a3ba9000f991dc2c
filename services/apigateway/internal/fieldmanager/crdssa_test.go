package fieldmanager

import (
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// TestCRDManagedFields: a CRD whose schema has enums, defaults and array
// items (free-form JSON in the CRD type) gets managedFields on update,
// with the CRD kind's schema structured (not deduced).
func TestCRDManagedFields(t *testing.T) {
	k, err := ForKind(registry.CustomResourceDefinitions(), nil)
	if err != nil || k.deduced {
		t.Fatalf("ForKind: %v, deduced %v", err, k != nil && k.deduced)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	crd.Name = "gadgets.example.com"
	crd.Spec.Group = "example.com"
	crd.Spec.Versions = []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true, Schema: &apiextensionsv1.CustomResourceValidation{
		OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
			"color": {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"red"`)}}, Default: &apiextensionsv1.JSON{Raw: []byte(`"red"`)}},
			"ports": {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "integer"}}},
		}},
	}}}
	crd.APIVersion, crd.Kind = "apiextensions.k8s.io/v1", "CustomResourceDefinition"
	live := &apiextensionsv1.CustomResourceDefinition{}
	live.Name, live.APIVersion, live.Kind = crd.Name, crd.APIVersion, crd.Kind
	out := k.Update("", live, crd, "kubectl").(*apiextensionsv1.CustomResourceDefinition)
	if len(out.ManagedFields) != 1 || out.ManagedFields[0].Manager != "kubectl" {
		t.Fatalf("managedFields = %+v, want one entry of kubectl", out.ManagedFields)
	}
}
