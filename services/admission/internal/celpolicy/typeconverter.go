package celpolicy

import (
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/client-go/applyconfigurations"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

// typeConverter is the type converter ApplyConfiguration mutations merge
// with, as kube-apiserver's: a built-in kind is typed with its schema
// (client-go's applyconfigurations schemas, the structured-merge-diff
// form of the kinds' OpenAPI), so that a list with
// x-kubernetes-list-map-keys merges per key (a Pod's containers by name)
// and a mutation of an atomic list is refused; any other kind (custom
// resources, whose schemas this service does not follow) is deduced: maps
// merge per key, lists are atomic.
//
// The built-in schemas are parsed on the first built-in object converted,
// not at start: a service without ApplyConfiguration mutations never holds
// them.
type typeConverter struct {
	builtin func() managedfields.TypeConverter
	deduced managedfields.TypeConverter
}

var _ managedfields.TypeConverter = (*typeConverter)(nil)

func newTypeConverter() *typeConverter {
	return &typeConverter{
		builtin: sync.OnceValue(func() managedfields.TypeConverter {
			return applyconfigurations.NewTypeConverter(clientgoscheme.Scheme)
		}),
		deduced: managedfields.NewDeducedTypeConverter(),
	}
}

// ObjectToTyped types obj with its kind's schema when it is a built-in
// kind, else as deduced.
func (t *typeConverter) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	if clientgoscheme.Scheme.Recognizes(obj.GetObjectKind().GroupVersionKind()) {
		return t.builtin().ObjectToTyped(obj, opts...)
	}
	return t.deduced.ObjectToTyped(obj, opts...)
}

// TypedToObject returns value as an unstructured object (the same for
// either converter).
func (t *typeConverter) TypedToObject(value *typed.TypedValue) (runtime.Object, error) {
	return t.deduced.TypedToObject(value)
}
