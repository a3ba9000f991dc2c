package codec

import (
	"errors"
	"strings"
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestUnstructured: a custom resource is stored as JSON without its
// resourceVersion, read back through another version with that version's
// apiVersion (conversion None) and integers as int64, refused in
// protobuf, and a body of another kind is refused.
func TestUnstructured(t *testing.T) {
	c, err := New()
	if err != nil {
		t.Fatal(err)
	}
	v1 := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
	obj := &unstructured.Unstructured{}
	if err := c.Decode([]byte(`{"metadata":{"name":"w","resourceVersion":"7"},"spec":{"replicas":3}}`), negotiation.JSON, v1, obj); err != nil {
		t.Fatal(err)
	}
	if obj.GroupVersionKind() != v1 {
		t.Errorf("decoded kind %v, want %v", obj.GroupVersionKind(), v1)
	}
	stored, err := c.EncodeStorage(obj)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(stored), "resourceVersion") || !strings.HasPrefix(string(stored), "{") {
		t.Errorf("stored form %s", stored)
	}
	beta := &unstructured.Unstructured{}
	beta.SetGroupVersionKind(schema.GroupVersionKind{Group: "example.com", Version: "v1beta1", Kind: "Widget"})
	if err := c.DecodeStorage(stored, 42, beta); err != nil {
		t.Fatal(err)
	}
	if beta.GetAPIVersion() != "example.com/v1beta1" || beta.GetResourceVersion() != "42" {
		t.Errorf("read back as %s at %s", beta.GetAPIVersion(), beta.GetResourceVersion())
	}
	if n, ok, _ := unstructured.NestedInt64(beta.Object, "spec", "replicas"); !ok || n != 3 {
		t.Errorf("spec.replicas = %v, %v", n, ok)
	}
	if _, err := c.EncodeToBytes(beta, negotiation.Protobuf); !errors.Is(err, ErrNoProtobuf) {
		t.Errorf("protobuf encoding: %v", err)
	}
	y, err := c.EncodeToBytes(beta, negotiation.YAML)
	if err != nil || !strings.Contains(string(y), "apiVersion: example.com/v1beta1") {
		t.Errorf("YAML: %v\n%s", err, y)
	}
	if err := c.Decode([]byte(`{"apiVersion":"example.com/v1","kind":"Gadget"}`), negotiation.JSON, v1, &unstructured.Unstructured{}); err == nil {
		t.Error("a Gadget body was accepted by the Widget endpoint")
	}
}
