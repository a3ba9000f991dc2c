package celpolicy

import (
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"

	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/internal/admitattrs"
)

// attributes is one request as Kubernetes' admission libraries read it:
// the objects decoded once (unstructured), shared by every policy that
// evaluates the request.
type attributes struct {
	admission.Attributes
	versioned *admission.VersionedAttributes
	// size is the request's serialized size, which bounds the size of
	// every string, list and map decoded from it.
	size uint64
}

// newAttributes converts req. An object that is not a JSON object, or
// options that are not one, are an error (the gateway sends neither).
func newAttributes(req *admissionv1.AdmitRequest) (*attributes, error) {
	v, err := admitattrs.Versioned(req, req.GetObject())
	if err != nil {
		return nil, err
	}
	return &attributes{Attributes: v.Attributes, versioned: v, size: uint64(proto.Size(req))}, nil
}

// objectLabels returns the labels of the request's object, or of its old
// object for a delete: what objectSelector matches.
func (a *attributes) objectLabels() (newLabels, oldLabels map[string]string) {
	if o, ok := a.GetObject().(metav1.Object); ok {
		newLabels = o.GetLabels()
	}
	if o, ok := a.GetOldObject().(metav1.Object); ok {
		oldLabels = o.GetLabels()
	}
	return newLabels, oldLabels
}
