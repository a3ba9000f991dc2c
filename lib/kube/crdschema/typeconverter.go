package crdschema

import (
	"fmt"
	"maps"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// TypeConverter is the server-side apply type converter of every version
// of crd: each kind's definition is the version's structural schema, so
// x-kubernetes-list-type (atomic, set, map with
// x-kubernetes-list-map-keys), x-kubernetes-map-type (granular, atomic)
// and x-kubernetes-preserve-unknown-fields drive merging and field
// ownership; a list without markers is atomic. Metadata merges as for
// built-in kinds. Build it once per CRD generation.
func TypeConverter(crd *apiextensionsv1.CustomResourceDefinition) (managedfields.TypeConverter, error) {
	crd = defaulted(crd)
	models := map[string]*spec.Schema{}
	for _, v := range crd.Spec.Versions {
		defs, err := versionDefinitions(crd, v.Name, v2RefPrefix, false)
		if err != nil {
			return nil, err
		}
		maps.Copy(models, defs)
	}
	tc, err := managedfields.NewTypeConverter(models, crd.Spec.PreserveUnknownFields)
	if err != nil {
		return nil, fmt.Errorf("crdschema: type converter of %s: %w", crd.Name, err)
	}
	return tc, nil
}
