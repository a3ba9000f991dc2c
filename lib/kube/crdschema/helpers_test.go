package crdschema

import (
	"os"
	"path/filepath"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// loadCRD reads testdata/name as a v1 CRD, strictly.
func loadCRD(t testing.TB, name string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return parseCRD(t, string(b))
}

// parseCRD decodes YAML into a v1 CRD, strictly.
func parseCRD(t testing.TB, doc string) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict([]byte(doc), crd); err != nil {
		t.Fatalf("decoding CRD: %v", err)
	}
	return crd
}

// parseObj decodes a YAML object as the gateway would hand it to Admit.
func parseObj(t testing.TB, doc string) *unstructured.Unstructured {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatalf("decoding object: %v", err)
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(j); err != nil {
		t.Fatalf("decoding object: %v", err)
	}
	return obj
}

// compile compiles version of the CRD in testdata/name.
func compile(t testing.TB, name, version string) *Schema {
	t.Helper()
	s, err := Compile(loadCRD(t, name), version)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return s
}

// establishedCondition is the Established=True condition the CRD
// controller sets.
func establishedCondition() apiextensionsv1.CustomResourceDefinitionCondition {
	return apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}
}
