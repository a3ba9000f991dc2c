package celpolicy

import (
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
)

// attributes is one request as Kubernetes' admission libraries read it:
// the objects decoded once (unstructured), shared by every policy that
// evaluates the request.
type attributes struct {
	admission.Attributes
	versioned *admission.VersionedAttributes
}

// newAttributes converts req. An object that is not a JSON object, or
// options that are not one, are an error (the gateway sends neither).
func newAttributes(req *admissionv1.AdmitRequest) (*attributes, error) {
	obj, err := decodeObject(req.GetObject())
	if err != nil {
		return nil, fmt.Errorf("object: %w", err)
	}
	old, err := decodeObject(req.GetOldObject())
	if err != nil {
		return nil, fmt.Errorf("oldObject: %w", err)
	}
	var opts runtime.Object
	if o := req.GetOptions(); len(o) > 0 {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(o); err != nil {
			return nil, fmt.Errorf("options: %w", err)
		}
		opts = u
	}
	k, r := req.GetKind(), req.GetResource()
	gvk := schema.GroupVersionKind{Group: k.GetGroup(), Version: k.GetVersion(), Kind: k.GetKind()}
	gvr := schema.GroupVersionResource{Group: r.GetGroup(), Version: r.GetVersion(), Resource: r.GetResource()}
	a := admission.NewAttributesRecord(nilIfEmpty(obj), nilIfEmpty(old), gvk, req.GetNamespace(), req.GetName(), gvr,
		req.GetSubResource(), operation(req.GetOperation()), opts, req.GetDryRun(), userInfo(req.GetUserInfo()))
	return &attributes{Attributes: a, versioned: &admission.VersionedAttributes{
		Attributes: a, VersionedKind: gvk, VersionedObject: admission.NewLazyObject(nilIfEmpty(obj)), VersionedOldObject: admission.NewLazyObject(nilIfEmpty(old)),
	}}, nil
}

// decodeObject decodes a JSON object; empty data is nil.
func decodeObject(data []byte) (*unstructured.Unstructured, error) {
	if len(data) == 0 {
		return nil, nil
	}
	m := map[string]any{}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// nilIfEmpty keeps a nil object an untyped nil interface, as the
// admission libraries test it.
func nilIfEmpty(u *unstructured.Unstructured) runtime.Object {
	if u == nil {
		return nil
	}
	return u
}

func operation(op admissionv1.Operation) admission.Operation {
	switch op {
	case admissionv1.Operation_OPERATION_CREATE:
		return admission.Create
	case admissionv1.Operation_OPERATION_UPDATE:
		return admission.Update
	case admissionv1.Operation_OPERATION_DELETE:
		return admission.Delete
	default:
		return admission.Connect
	}
}

func userInfo(u *admissionv1.UserInfo) user.Info {
	info := &user.DefaultInfo{Name: u.GetUsername(), UID: u.GetUid(), Groups: u.GetGroups()}
	if len(u.GetExtra()) > 0 {
		info.Extra = map[string][]string{}
		for k, v := range u.GetExtra() {
			info.Extra[k] = v.GetValues()
		}
	}
	return info
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
