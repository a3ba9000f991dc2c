package openapi

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	openapiv2 "github.com/google/gnostic-models/openapiv2"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"google.golang.org/protobuf/proto"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	kubeproto "k8s.io/kube-openapi/pkg/util/proto"
)

func v2TestCRD() *apiextensionsv1.CustomResourceDefinition {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	crd.Name = "widgets.example.com"
	crd.Spec.Group, crd.Spec.Scope = "example.com", apiextensionsv1.NamespaceScoped
	crd.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "Widget", ListKind: "WidgetList", Singular: "widget"}
	crd.Status.AcceptedNames = crd.Spec.Names
	crd.Spec.Versions = []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
		Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "object",
			Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {Type: "object", Description: "Spec of a widget.",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{"size": {Type: "integer", Description: "How big."}}}},
		}}}}
	crd.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}}
	return crd
}

// TestV2ListsCustomResources: /openapi/v2 holds an established CRD's
// definitions and paths, in JSON and in the protobuf kubectl reads (its
// models resolve the kind's fields, metadata included), from the moment
// the registry serves it, and no more once it does not.
func TestV2ListsCustomResources(t *testing.T) {
	reg := registry.New(registry.Standard()...)
	v2, err := NewV2(reg, "v1.36.0")
	if err != nil {
		t.Fatal(err)
	}
	const model = "com.example.v1.Widget"
	docOf := func() (map[string]any, kubeproto.Models) {
		t.Helper()
		js, err := v2.JSON()
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(js, &doc); err != nil {
			t.Fatal(err)
		}
		pb, err := v2.Protobuf()
		if err != nil {
			t.Fatal(err)
		}
		var parsed openapiv2.Document
		if err := proto.Unmarshal(pb, &parsed); err != nil {
			t.Fatal(err)
		}
		models, err := kubeproto.NewOpenAPIData(&parsed)
		if err != nil {
			t.Fatalf("kubectl's models of the protobuf document: %v", err)
		}
		return doc, models
	}
	doc, models := docOf()
	if _, ok := doc["definitions"].(map[string]any)[model]; ok || models.LookupModel(model) != nil {
		t.Fatal("Widget defined before its CRD is served")
	}
	if models.LookupModel("io.k8s.api.core.v1.ConfigMap") == nil {
		t.Fatal("no ConfigMap model")
	}

	reg.SetCustom(registry.CustomResources(v2TestCRD()))
	doc, models = docOf()
	if _, ok := doc["paths"].(map[string]any)["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]; !ok {
		t.Error("no path of a widget")
	}
	// kubectl leaves validation to the server when the PATCH operation
	// of the kind takes fieldValidation.
	patch, _ := doc["paths"].(map[string]any)["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"].(map[string]any)["patch"].(map[string]any)
	if !strings.Contains(fmt.Sprint(patch["parameters"]), "name:fieldValidation") {
		t.Errorf("a widget's PATCH does not take fieldValidation: %v", patch["parameters"])
	}
	kind, ok := models.LookupModel(model).(*kubeproto.Kind)
	if !ok {
		t.Fatalf("model %s: %v", model, models.LookupModel(model))
	}
	spec, ok := kind.Fields["spec"].(*kubeproto.Kind)
	if !ok || spec.GetDescription() != "Spec of a widget." {
		t.Fatalf("Widget's spec: %#v", kind.Fields["spec"])
	}
	if size, ok := spec.Fields["size"].(*kubeproto.Primitive); !ok || size.Type != "integer" || size.GetDescription() != "How big." {
		t.Errorf("Widget's spec.size: %#v", spec.Fields["size"])
	}
	if ref, ok := kind.Fields["metadata"].(kubeproto.Reference); !ok || ref.SubSchema() == nil {
		t.Errorf("Widget's metadata does not resolve: %#v", kind.Fields["metadata"])
	}
	if gvk := kind.GetExtensions()["x-kubernetes-group-version-kind"]; gvk == nil {
		t.Error("Widget has no x-kubernetes-group-version-kind")
	}

	reg.SetCustom(nil)
	if _, models = docOf(); models.LookupModel(model) != nil {
		t.Error("Widget still defined after its CRD went")
	}
}

// TestV3CustomWriteParams: a CRD's v3 document lets kubectl see that the
// server validates fields (fieldValidation on the kind's PATCH), so it
// leaves validation to the server.
func TestV3CustomWriteParams(t *testing.T) {
	reg := registry.New(registry.Standard()...)
	docs, err := New(reg, "v1.36.0")
	if err != nil {
		t.Fatal(err)
	}
	reg.SetCustom(registry.CustomResources(v2TestCRD()))
	js, ok := docs.Lookup("/openapi/v3/apis/example.com/v1")
	if !ok {
		t.Fatal("no document of example.com/v1")
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(js, &doc); err != nil {
		t.Fatal(err)
	}
	var patch struct {
		Parameters []struct{ Name, In string } `json:"parameters"`
	}
	if err := json.Unmarshal(doc.Paths["/apis/example.com/v1/namespaces/{namespace}/widgets/{name}"]["patch"], &patch); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(fmt.Sprint(patch.Parameters), "{fieldValidation query}") {
		t.Errorf("a widget's PATCH parameters: %v, want fieldValidation", patch.Parameters)
	}
}
