package fieldmanager

import (
	"fmt"
	"reflect"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// kindConverter is the object converter, creater and defaulter that the
// managedfields package needs, for one kind served in one version: every
// "conversion" is between the kind's Go type and its unstructured form, so
// no scheme is involved. Defaulting is the registry strategy's job, later
// on the write path, so Default does nothing.
type kindConverter struct {
	res *registry.Resource
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
