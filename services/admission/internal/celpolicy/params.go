package celpolicy

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/google/cel-go/common/types/ref"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	celcommon "k8s.io/apiserver/pkg/cel/common"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/admission/internal/storecache"
)

// paramSource is where a policy's param objects come from: the followed
// objects of its paramKind's resource.
type paramSource struct {
	kind  *admissionregistrationv1.ParamKind
	res   *registry.Resource
	cache *storecache.Cache

	// memo holds each cached object's conversion, made once when a
	// request first reads it, under both the cached object (bySource)
	// and its conversion (byParam). The cache replaces an object on each
	// change, so an entry never goes stale; the maps are cleared when
	// they exceed maxParamMemo entries (deleted objects' entries).
	mu       sync.RWMutex
	bySource map[runtime.Object]*paramEntry
	byParam  map[runtime.Object]*paramEntry
}

// paramEntry is a param object as the policies read it: unstructured with
// its paramKind's apiVersion and kind, as a CEL value, and the size of
// its JSON, which bounds every value read from it (see inputSize).
type paramEntry struct {
	obj  *unstructured.Unstructured
	val  ref.Val
	size uint64
}

// maxParamMemo bounds the entries of a paramSource's memo.
const maxParamMemo = 4096

// entry returns o's conversion, memoized.
func (ps *paramSource) entry(o runtime.Object) (*paramEntry, error) {
	ps.mu.RLock()
	e := ps.bySource[o]
	ps.mu.RUnlock()
	if e != nil {
		return e, nil
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	if err != nil {
		return nil, fmt.Errorf("param: %w", err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(ps.kind.APIVersion)
	u.SetKind(ps.kind.Kind)
	js, err := json.Marshal(u)
	if err != nil {
		return nil, fmt.Errorf("param: %w", err)
	}
	e = &paramEntry{obj: u, val: celcommon.SchemalessTypedToVal(u), size: uint64(len(js))}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if prev := ps.bySource[o]; prev != nil { // converted concurrently
		return prev, nil
	}
	if ps.bySource == nil || len(ps.bySource) >= maxParamMemo {
		ps.bySource, ps.byParam = map[runtime.Object]*paramEntry{}, map[runtime.Object]*paramEntry{}
	}
	ps.bySource[o], ps.byParam[u] = e, e
	return e, nil
}

// converted returns the memoized conversion of a param collect returned,
// or nil (a param from elsewhere, or nil).
func (ps *paramSource) converted(param runtime.Object) *paramEntry {
	if ps == nil || param == nil {
		return nil
	}
	ps.mu.RLock()
	defer ps.mu.RUnlock()
	return ps.byParam[param]
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
		e, err := ps.entry(o)
		if err != nil {
			return nil, err
		}
		out[i] = e.obj
	}
	return out, nil
}
