package codec

import (
	"io"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The items of a <Kind>List carry no apiVersion or kind of their own: the
// list names them. kube-apiserver writes
//
//	{"kind":"ConfigMapList","apiVersion":"v1","metadata":{…},"items":[{"metadata":…},…]}
//
// and clients fill each item's kind from the list's (client-go's
// unstructured lists do). Watch events and single objects carry theirs.

// SetListItems sets list's items to items, cleared of their apiVersion
// and kind (meta.SetList copies them into the list as they are). It
// modifies items, which the caller owns.
func SetListItems(list runtime.Object, items []runtime.Object) error {
	for _, it := range items {
		it.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	}
	return meta.SetList(list, items)
}

// EncodeListItem writes obj in mediaType as an item of a list: without its
// apiVersion and kind, which it clears (obj is the caller's).
func (c *Codec) EncodeListItem(w io.Writer, obj runtime.Object, mediaType string) error {
	s, err := c.serializer(mediaType)
	if err != nil {
		return err
	}
	obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	return s.Encode(obj, w)
}
