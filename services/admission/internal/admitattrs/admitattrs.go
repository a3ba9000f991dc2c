// Package admitattrs converts an AdmitRequest to the attributes
// Kubernetes' admission libraries read (rule matchers, match conditions,
// CEL admission), for the CEL policies and the webhooks alike.
package admitattrs

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	admitv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
)

// Versioned converts req, with object as its object (the request's own,
// or the one earlier mutations made), decoding the objects once
// (unstructured). An object or options that are not a JSON object are an
// error (the gateway sends neither).
func Versioned(req *admitv1.AdmitRequest, object []byte) (*admission.VersionedAttributes, error) {
	obj, err := decodeObject(object)
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
	a := admission.NewAttributesRecord(obj, old, gvk, req.GetNamespace(), req.GetName(), gvr,
		req.GetSubResource(), Operation(req.GetOperation()), opts, req.GetDryRun(), userInfo(req.GetUserInfo()))
	return &admission.VersionedAttributes{Attributes: a, VersionedKind: gvk, VersionedObject: admission.NewLazyObject(obj), VersionedOldObject: admission.NewLazyObject(old)}, nil
}

// decodeObject decodes a JSON object; empty data is an untyped nil, as
// the admission libraries test it.
func decodeObject(data []byte) (runtime.Object, error) {
	if len(data) == 0 {
		return nil, nil
	}
	m, err := unmarshalObject(data)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// Operation converts the request's operation; an unknown one is CONNECT.
func Operation(op admitv1.Operation) admission.Operation {
	switch op {
	case admitv1.Operation_OPERATION_CREATE:
		return admission.Create
	case admitv1.Operation_OPERATION_UPDATE:
		return admission.Update
	case admitv1.Operation_OPERATION_DELETE:
		return admission.Delete
	default:
		return admission.Connect
	}
}

func userInfo(u *admitv1.UserInfo) user.Info {
	info := &user.DefaultInfo{Name: u.GetUsername(), UID: u.GetUid(), Groups: u.GetGroups()}
	if len(u.GetExtra()) > 0 {
		info.Extra = map[string][]string{}
		for k, v := range u.GetExtra() {
			info.Extra[k] = v.GetValues()
		}
	}
	return info
}
