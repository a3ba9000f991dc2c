package protolist

import (
	"reflect"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// TestMetaEveryKind stores an object of every kind the codec knows with
// full metadata and reads it back without decoding: the result must equal
// the decoded object's metadata. A kind whose ObjectMeta is not field 1
// would fail here.
func TestMetaEveryKind(t *testing.T) {
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.NewTime(time.Unix(1700000000, 0))
	yes := true
	kinds := 0
	for gvk := range c.Scheme().AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal || gvk.Group == metav1.GroupName || gvk.GroupVersion() == (schema.GroupVersion{Version: "v1"}) && isMetaKind(gvk.Kind) {
			continue
		}
		obj, err := c.Scheme().New(gvk)
		if err != nil {
			t.Fatal(err)
		}
		acc, err := meta.Accessor(obj)
		if err != nil || meta.IsListType(obj) {
			continue // options and lists are not stored objects
		}
		kinds++
		acc.SetName("näme-" + gvk.Kind)
		acc.SetNamespace("ns")
		acc.SetUID(types.UID("uid-" + gvk.Kind))
		acc.SetLabels(map[string]string{"a": "b"})
		acc.SetAnnotations(map[string]string{"c": "d"})
		acc.SetDeletionTimestamp(&now)
		acc.SetFinalizers([]string{"orphan", "example.com/x"})
		acc.SetOwnerReferences([]metav1.OwnerReference{
			{APIVersion: "v1", Kind: "ConfigMap", Name: "o1", UID: "u1", Controller: &yes},
			{APIVersion: "apps/v1", Kind: "Deployment", Name: "o2", UID: "u2", BlockOwnerDeletion: &yes},
		})
		acc.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "m", Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{}}`)}}})
		data, err := c.EncodeStorage(obj)
		if err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
		got, err := readMeta(data, gvk)
		if err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
		want := Meta{Name: acc.GetName(), Namespace: "ns", UID: acc.GetUID(), Deleting: true, Finalizers: acc.GetFinalizers(), OwnerReferences: acc.GetOwnerReferences()}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got %+v\nwant %+v", gvk, got, want)
		}

		// Without the optional parts.
		bare, _ := c.Scheme().New(gvk)
		bacc, _ := meta.Accessor(bare)
		bacc.SetName("x")
		data, err = c.EncodeStorage(bare)
		if err != nil {
			t.Fatal(err)
		}
		got, err = readMeta(data, gvk)
		if err != nil || !reflect.DeepEqual(got, Meta{Name: "x"}) {
			t.Errorf("%s bare: %+v, %v", gvk, got, err)
		}
	}
	if kinds < 20 {
		t.Fatalf("only %d stored kinds checked", kinds)
	}
}

func isMetaKind(kind string) bool {
	switch kind {
	case "Status", "WatchEvent", "APIVersions", "APIGroupList", "APIGroup", "APIResourceList", "DeleteOptions", "CreateOptions", "UpdateOptions", "PatchOptions", "GetOptions", "ListOptions":
		return true
	}
	return false
}

// readMeta parses a stored value and reads its Meta.
func readMeta(data []byte, gvk schema.GroupVersionKind) (Meta, error) {
	o, err := Parse(data, gvk)
	if err != nil {
		return Meta{}, err
	}
	return o.Meta()
}

func TestMetaRejectsOtherForms(t *testing.T) {
	gvk := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	for name, data := range map[string][]byte{
		"json":      []byte(`{"kind":"ConfigMap"}`),
		"empty":     nil,
		"truncated": {'k', '8', 's', 0, 0x12, 0x50, 0x0a},
		"no raw":    {'k', '8', 's', 0, 0x0a, 0x00},
	} {
		if _, err := readMeta(data, gvk); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
