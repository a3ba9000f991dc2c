// Package registrytest builds the metadata of sample objects of the
// registry's resources for tests of encoders and framers: names and
// labels with non-ASCII text, managed fields and owner references on some
// of them.
package registrytest

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meridian-cp/meridian/lib/kube/registry"
)

// SetMeta fills in the metadata of the i-th sample object of res: name
// obj-<i> (three digits), namespace "ns-ü" when res is namespaced; for odd
// i labels and annotations (non-ASCII, one empty value); for i%3 == 1 a
// managed-fields entry of an apply at now and an owner reference.
func SetMeta(obj metav1.Object, res *registry.Resource, i int, now metav1.Time) {
	obj.SetName(fmt.Sprintf("obj-%03d", i))
	if res.Namespaced {
		obj.SetNamespace("ns-ü")
	}
	if i%2 == 1 {
		obj.SetLabels(map[string]string{"app": "démo", "tier": fmt.Sprint(i)})
		obj.SetAnnotations(map[string]string{"note": "日本語 ✓", "empty": ""})
	}
	if i%3 == 1 {
		obj.SetManagedFields([]metav1.ManagedFieldsEntry{{
			Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: res.GVR.GroupVersion().String(),
			Time: &now, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:labels":{"f:app":{}}}}`)},
		}})
		obj.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "u-1"}})
	}
}
