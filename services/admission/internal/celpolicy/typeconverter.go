package celpolicy

import (
	"fmt"
	"sync"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/typeschema"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

// typeConverter is the type converter ApplyConfiguration mutations merge
// with, as kube-apiserver's: a built-in kind (one registry.Standard
// serves) is typed with its schema, the one the gateway's server-side
// apply merges with (typeschema.NewTypeConverter, derived from the kind's
// Go type), so that a list with x-kubernetes-list-map-keys merges per key
// (a Pod's containers by name) and a mutation of an atomic list is
// refused; any other kind (custom resources, whose schemas this service
// does not follow) is deduced: maps merge per key, lists are atomic.
//
// The built-in schemas are built on the first built-in object converted,
// not at start: a service without ApplyConfiguration mutations never holds
// them.
type typeConverter struct {
	// builtinKinds are the kinds the built-in converter types.
	builtinKinds map[schema.GroupVersionKind]bool
	builtin      func() (managedfields.TypeConverter, error)
	deduced      managedfields.TypeConverter
}

var _ managedfields.TypeConverter = (*typeConverter)(nil)

// newTypeConverter returns the type converter for the built-in kinds
// reg serves (registry.Standard's).
func newTypeConverter(reg *registry.Registry) *typeConverter {
	kinds := map[schema.GroupVersionKind]bool{}
	for _, res := range reg.All() {
		kinds[res.GVK()] = true
	}
	return &typeConverter{
		builtinKinds: kinds,
		builtin: sync.OnceValues(func() (managedfields.TypeConverter, error) {
			return typeschema.NewTypeConverter(reg)
		}),
		deduced: managedfields.NewDeducedTypeConverter(),
	}
}

// ObjectToTyped types obj with its kind's schema when it is a built-in
// kind, else as deduced.
func (t *typeConverter) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	if t.builtinKinds[obj.GetObjectKind().GroupVersionKind()] {
		tc, err := t.builtin()
		if err != nil {
			return nil, fmt.Errorf("celpolicy: built-in kinds' schemas: %w", err)
		}
		return tc.ObjectToTyped(obj, opts...)
	}
	return t.deduced.ObjectToTyped(obj, opts...)
}

// TypedToObject returns value as an unstructured object (the same for
// either converter).
func (t *typeConverter) TypedToObject(value *typed.TypedValue) (runtime.Object, error) {
	return t.deduced.TypedToObject(value)
}
