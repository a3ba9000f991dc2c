package webhook

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"

	admitv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/internal/admitattrs"
)

// attributes converts req, with object as its object (the one earlier
// mutating webhooks made), to what Kubernetes' admission libraries read:
// rule matchers and match conditions.
func attributes(req *admitv1.AdmitRequest, object []byte) (*admission.VersionedAttributes, error) {
	return admitattrs.Versioned(req, object)
}

// decodeObject decodes a JSON object; empty data is nil.
func decodeObject(data []byte) (runtime.Object, error) {
	if len(data) == 0 {
		return nil, nil
	}
	m := map[string]any{}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// objectLabels returns the labels of a's object and old object: what an
// objectSelector matches.
func objectLabels(a admission.Attributes) (newLabels, oldLabels map[string]string) {
	if o, ok := a.GetObject().(metav1.Object); ok {
		newLabels = o.GetLabels()
	}
	if o, ok := a.GetOldObject().(metav1.Object); ok {
		oldLabels = o.GetLabels()
	}
	return newLabels, oldLabels
}
