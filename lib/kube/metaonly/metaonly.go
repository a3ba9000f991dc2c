// Package metaonly turns objects and lists into their metadata-only forms,
// meta.k8s.io/v1 PartialObjectMetadata and PartialObjectMetadataList, which
// clients that only need metadata (controller-runtime's metadata client,
// garbage collectors) ask for with
// Accept: application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1.
package metaonly

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

var (
	objectKind = metav1.TypeMeta{Kind: "PartialObjectMetadata", APIVersion: "meta.k8s.io/v1"}
	listKind   = metav1.TypeMeta{Kind: "PartialObjectMetadataList", APIVersion: "meta.k8s.io/v1"}
)

// Convert returns the metadata-only form of obj: a PartialObjectMetadataList
// for a list, a PartialObjectMetadata otherwise.
func Convert(obj runtime.Object) (runtime.Object, error) {
	if !meta.IsListType(obj) {
		return Object(obj)
	}
	items, err := meta.ExtractList(obj)
	if err != nil {
		return nil, fmt.Errorf("metaonly: %w", err)
	}
	lm, err := meta.ListAccessor(obj)
	if err != nil {
		return nil, fmt.Errorf("metaonly: %w", err)
	}
	out := &metav1.PartialObjectMetadataList{TypeMeta: listKind, Items: make([]metav1.PartialObjectMetadata, 0, len(items))}
	out.ResourceVersion, out.Continue, out.RemainingItemCount = lm.GetResourceVersion(), lm.GetContinue(), lm.GetRemainingItemCount()
	for _, item := range items {
		p, err := Object(item)
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, *p)
	}
	return out, nil
}

// Object returns the PartialObjectMetadata of one object.
func Object(obj runtime.Object) (*metav1.PartialObjectMetadata, error) {
	a, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("metaonly: %w", err)
	}
	p := meta.AsPartialObjectMetadata(a)
	p.TypeMeta = objectKind
	return p, nil
}
