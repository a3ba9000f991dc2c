package fieldmanager

import (
	"context"
	"fmt"
	"maps"
	"reflect"

	"github.com/meridian-cp/meridian/lib/kube/crdconvert"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// kindConverter is the object converter, creater and defaulter that the
// managedfields package needs, for one kind served in one version: for a
// built-in kind every "conversion" is between the kind's Go type and its
// unstructured form, so no scheme is involved; a custom resource converts
// between its CRD's versions (convertCustom). Defaulting is the registry
// strategy's job, later on the write path, so Default does nothing.
type kindConverter struct {
	res *registry.Resource
	// versions converts custom resources between versions; nil: only
	// conversion None.
	versions VersionConverter
}

var (
	_ runtime.ObjectConvertor = kindConverter{}
	_ runtime.ObjectCreater   = kindConverter{}
	_ runtime.ObjectDefaulter = kindConverter{}
)

// New returns an empty object of the kind.
func (c kindConverter) New(gvk schema.GroupVersionKind) (runtime.Object, error) {
	if gvk != c.res.GVK() {
		return nil, runtime.NewNotRegisteredErrForKind("meridian", gvk)
	}
	obj := c.res.New()
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	return obj, nil
}

// Default does nothing (see kindConverter).
func (kindConverter) Default(runtime.Object) {}

// Convert is not used by the field managers.
func (c kindConverter) Convert(in, out, _ any) error {
	return fmt.Errorf("fieldmanager: %s: Convert is not supported", c.res.GVK())
}

// ConvertFieldLabel is not used by the field managers.
func (c kindConverter) ConvertFieldLabel(_ schema.GroupVersionKind, label, value string) (string, string, error) {
	return label, value, nil
}

// ConvertToVersion returns in as the kind's Go type with apiVersion and
// kind set: an unstructured object is converted, a typed one is copied
// shallowly (the result shares maps and slices with in, as the interface
// allows, and in is not modified).
func (c kindConverter) ConvertToVersion(in runtime.Object, gv runtime.GroupVersioner) (runtime.Object, error) {
	if c.res.Custom != nil {
		return c.convertCustom(in, gv)
	}
	gvk := c.res.GVK()
	if target, ok := gv.KindForGroupVersionKinds([]schema.GroupVersionKind{gvk}); !ok || target != gvk {
		return nil, fmt.Errorf("fieldmanager: cannot convert %s to %v", gvk, gv)
	}
	if u, ok := in.(*unstructured.Unstructured); ok {
		if got := u.GroupVersionKind(); got != gvk {
			return nil, fmt.Errorf("fieldmanager: object is a %s, not a %s", got, gvk)
		}
		out := c.res.New()
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), out); err != nil {
			return nil, fmt.Errorf("fieldmanager: %s: %w", gvk, err)
		}
		out.GetObjectKind().SetGroupVersionKind(gvk)
		return out, nil
	}
	want := reflect.TypeOf(c.res.New())
	v := reflect.ValueOf(in)
	if v.Type() != want || v.IsNil() {
		return nil, fmt.Errorf("fieldmanager: %T is not a %s", in, gvk)
	}
	cp := reflect.New(want.Elem())
	cp.Elem().Set(v.Elem())
	out := cp.Interface().(runtime.Object)
	out.GetObjectKind().SetGroupVersionKind(gvk)
	return out, nil
}

// convertCustom converts in, a custom resource, to the version gv names,
// as upstream's CR converter does for the CRD field managers: both
// versions must be defined by the CRD; an object already at the target
// version is wrapped as it is (the managers only read what
// ConvertToVersion returns, to build typed values; a reflective copy of
// the whole map was a tenth of a custom resource create's CPU); another
// version is reached on a copy through the CRD's conversion. Like
// upstream, the call has no request context: a webhook call is bounded by
// the converter's own timeout.
func (c kindConverter) convertCustom(in runtime.Object, gv runtime.GroupVersioner) (runtime.Object, error) {
	u, ok := in.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("fieldmanager: %T is not a %s", in, c.res.GVK())
	}
	from := u.GroupVersionKind()
	to, ok := gv.KindForGroupVersionKinds([]schema.GroupVersionKind{from})
	if !ok {
		return nil, fmt.Errorf("fieldmanager: %v is unstructured and is not suitable for converting to %q", from, gv)
	}
	crd := c.res.Custom.CRD
	for _, v := range []schema.GroupVersionKind{to, from} {
		if !definesVersion(crd, v.GroupVersion()) {
			return nil, fmt.Errorf("fieldmanager: request to convert CR to an invalid group/version: %s", v.GroupVersion())
		}
	}
	if from == to {
		return &unstructured.Unstructured{Object: u.Object}, nil
	}
	out := &unstructured.Unstructured{Object: maps.Clone(u.Object)}
	versions := c.versions
	if versions == nil {
		versions = crdconvert.New(nil, 0)
	}
	if err := versions.Convert(context.Background(), crd, []*unstructured.Unstructured{out}, to.Version); err != nil {
		return nil, fmt.Errorf("fieldmanager: %w", err)
	}
	return out, nil
}

// definesVersion reports whether gv is a version of crd.
func definesVersion(crd *apiextensionsv1.CustomResourceDefinition, gv schema.GroupVersion) bool {
	if gv.Group != crd.Spec.Group {
		return false
	}
	for _, v := range crd.Spec.Versions {
		if v.Name == gv.Version {
			return true
		}
	}
	return false
}
