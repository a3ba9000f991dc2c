package celpolicy

import (
	"errors"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/admission/internal/storecache"
)

// paramSource is where a policy's param objects come from: the followed
// objects of its paramKind's resource.
type paramSource struct {
	kind  *admissionregistrationv1.ParamKind
	res   *registry.Resource
	cache *storecache.Cache
}

// collect returns the param objects a binding's paramRef selects for the
// request a, as kube-apiserver's CollectParams does: one nil param when
// the policy has no paramKind or the binding no paramRef; the named
// object, or those the selector matches (in the request's namespace
// unless paramRef names one, for a namespaced kind); none found is an
// error under parameterNotFoundAction Deny and no evaluation under Allow.
// Params are handed to CEL as unstructured objects with their apiVersion
// and kind.
func (ps *paramSource) collect(ref *admissionregistrationv1.ParamRef, a *attributes) ([]runtime.Object, error) {
	if ps == nil || ref == nil {
		return []runtime.Object{nil}, nil
	}
	ns := ""
	if ps.res.Namespaced {
		ns = ref.Namespace
		if ns == "" {
			ns = a.GetNamespace()
		}
		if ns == "" {
			return nil, errors.New("cannot use namespaced paramRef in policy binding that matches cluster-scoped resources")
		}
	} else if ref.Namespace != "" {
		return nil, errors.New("paramRef.namespace must not be provided for a cluster-scoped `paramKind`")
	}
	var found []runtime.Object
	switch {
	case ref.Name != "" && ref.Selector != nil:
		return nil, errors.New("paramRef.name and paramRef.selector are mutually exclusive")
	case ref.Name != "":
		if o := ps.cache.Get(ps.res, ns, ref.Name); o != nil {
			found = []runtime.Object{o}
		}
	case ref.Selector != nil:
		sel, err := metav1.LabelSelectorAsSelector(ref.Selector)
		if err != nil {
			return nil, err
		}
		found = ps.cache.List(ps.res, ns, sel)
	default:
		return nil, errors.New("one of name or selector must be provided")
	}
	if len(found) == 0 {
		if a := ref.ParameterNotFoundAction; a != nil && *a == admissionregistrationv1.DenyAction {
			return nil, errors.New("no params found for policy binding with `Deny` parameterNotFoundAction")
		}
		return nil, nil
	}
	out := make([]runtime.Object, len(found))
	for i, o := range found {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return nil, fmt.Errorf("param: %w", err)
		}
		u := &unstructured.Unstructured{Object: m}
		u.SetAPIVersion(ps.kind.APIVersion)
		u.SetKind(ps.kind.Kind)
		out[i] = u
	}
	return out, nil
}
