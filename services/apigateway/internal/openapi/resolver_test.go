package openapi

import (
	"errors"
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
)

// TestSchemaResolver: a built-in kind resolves from its Go type and a
// custom resource from its CRD, every reference inlined (metadata's
// properties are there), a recursive type's reference back to itself as
// an empty object; an unserved kind is ErrSchemaNotFound.
func TestSchemaResolver(t *testing.T) {
	reg := registry.New(registry.Standard()...)
	reg.SetCustom(registry.CustomResources(&apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"replicas": {Type: "integer"}}},
					},
				}},
			}},
		},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{
			AcceptedNames: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Conditions: []apiextensionsv1.CustomResourceDefinitionCondition{
				{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue},
			}},
	}))
	r := NewSchemaResolver(reg)
	cm, err := r.ResolveSchema(k8sschema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Properties["data"].AdditionalProperties == nil || !cm.Properties["metadata"].Properties["name"].Type.Contains("string") {
		t.Errorf("ConfigMap schema lacks data or an inlined metadata.name: %+v", cm.Properties)
	}
	w, err := r.ResolveSchema(k8sschema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"})
	if err != nil {
		t.Fatal(err)
	}
	if !w.Properties["spec"].Properties["replicas"].Type.Contains("integer") || !w.Properties["metadata"].Properties["name"].Type.Contains("string") {
		t.Errorf("Widget schema lacks spec.replicas or an inlined metadata.name: %+v", w.Properties)
	}
	// JSONSchemaProps refers to itself: the reference back is an empty
	// object, the references around it are inlined.
	crd, err := r.ResolveSchema(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	if err != nil {
		t.Fatal(err)
	}
	props := crd.Properties["spec"].Properties["versions"].Items.Schema.Properties["schema"].Properties["openAPIV3Schema"]
	if !props.Properties["type"].Type.Contains("string") || !props.Properties["properties"].AdditionalProperties.Schema.Type.Contains("object") ||
		len(props.Properties["properties"].AdditionalProperties.Schema.Properties) != 0 {
		t.Errorf("openAPIV3Schema: %+v, want its type inlined and its properties' schema an empty object", props)
	}
	if _, err := r.ResolveSchema(k8sschema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}); !errors.Is(err, ErrSchemaNotFound) {
		t.Errorf("an unserved kind: %v, want ErrSchemaNotFound", err)
	}
}
