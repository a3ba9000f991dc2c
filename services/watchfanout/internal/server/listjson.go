package server

import (
	"bytes"
	"encoding/json"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// appendJSONList appends the JSON list of evs' objects with metadata lm
// to dst, spliced from each object's memoized JSON: byte for byte what
// decoding the objects into a <Kind>List and encoding it gives,
//
//	{"kind":"ConfigMapList","apiVersion":"v1","metadata":{…},"items":[…]}
//
// and a newline. An item is its object's JSON without the leading "kind"
// and "apiVersion" members (list items carry none: codec.SetListItems);
// the encoder writes TypeMeta first, so that is a fixed prefix, cut off.
// A custom resource's JSON is its map's, keys sorted, and its item
// (codec.EncodeListItem) has both members empty: when they are the
// object's first two, they are replaced by empty ones (listItemTypes).
//
// With flushAt > 0, dst is handed to flush (which must not keep it) and
// refilled from its start whenever the next item would take it past
// flushAt bytes, so each flush holds at most flushAt bytes unless one
// item alone is larger; what is left at the end is returned.
func (s *Server) appendJSONList(dst []byte, res *registry.Resource, evs []*cache.Event, lm *metav1.ListMeta, flushAt int, flush func([]byte) error) ([]byte, error) {
	jl, err := newJSONList(res, lm)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	dst = append(dst, jl.head...)
	typeMeta, custom := jl.typeMeta, jl.custom
	for i, ev := range evs {
		x, err := s.listItemJSON(ev, typeMeta, custom)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		if flushAt > 0 && len(dst) > 0 && len(dst)+1+x.size() > flushAt {
			if err := flush(dst); err != nil {
				return nil, err
			}
			dst = dst[:0]
		}
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = x.appendTo(dst)
	}
	if flushAt > 0 && len(dst) > 0 && len(dst)+3 > flushAt {
		if err := flush(dst); err != nil {
			return nil, err
		}
		dst = dst[:0]
	}
	return append(dst, "]}\n"...), nil
}

// jsonList is what a JSON list of a resource is written with: head
// opens the list up to its first item, and every object's memoized JSON
// starts with typeMeta (or, for a custom resource, custom).
type jsonList struct {
	head, typeMeta, custom []byte
}

// newJSONList returns the jsonList of res's list with metadata lm.
func newJSONList(res *registry.Resource, lm *metav1.ListMeta) (jsonList, error) {
	head := struct {
		Kind       string          `json:"kind"`
		APIVersion string          `json:"apiVersion"`
		Metadata   metav1.ListMeta `json:"metadata"`
	}{res.ListKind, res.GVR.GroupVersion().String(), *lm}
	h, err := json.Marshal(&head)
	if err != nil {
		return jsonList{}, err
	}
	// h is {"kind":…,"apiVersion":…,"metadata":{…}}: open it for items.
	jl := jsonList{head: append(h[:len(h)-1], `,"items":[`...)}
	if jl.typeMeta, err = json.Marshal(&struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
	}{res.Kind, res.GVK().GroupVersion().String()}); err != nil {
		return jsonList{}, err
	}
	jl.typeMeta[len(jl.typeMeta)-1] = ',' // {"kind":…,"apiVersion":…, starts every object
	if res.Custom != nil {
		if jl.custom, err = customTypeMeta(res); err != nil {
			return jsonList{}, err
		}
	}
	return jl, nil
}

// listItemTypes starts a custom resource's JSON list item: its map's
// first two keys, apiVersion and kind, emptied (codec.EncodeListItem).
const listItemTypes = `{"apiVersion":"","kind":"",`

// customTypeMeta is what starts the JSON of a custom resource of res
// whose first keys in sorted order are apiVersion and kind.
func customTypeMeta(res *registry.Resource) ([]byte, error) {
	b, err := json.Marshal(&struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}{res.GVK().GroupVersion().String(), res.Kind})
	if err != nil {
		return nil, err
	}
	b[len(b)-1] = ','
	return b, nil
}

// listItemJSON returns ev's object as a JSON list item: '{' and its
// memoized JSON after typeMeta (the leading kind and apiVersion members
// and the comma after them), or for a custom resource (custom not nil)
// listItemTypes and its memoized JSON after custom; shared, not copied.
func (s *Server) listItemJSON(ev *cache.Event, typeMeta, custom []byte) (jsonItem, error) {
	x, err := ev.ObjectJSON()
	if err != nil {
		return jsonItem{}, err
	}
	if rest, ok := bytes.CutPrefix(x, typeMeta); ok {
		return jsonItem{head: "{", rest: rest}, nil
	}
	if custom != nil {
		if rest, ok := bytes.CutPrefix(x, custom); ok {
			return jsonItem{head: listItemTypes, rest: rest}, nil
		}
	}
	// Not the encoder's usual shape (never for a kind it serves): encode
	// the object as an item.
	obj, err := ev.Object()
	if err != nil {
		return jsonItem{}, err
	}
	var buf bytes.Buffer
	if err := s.cfg.Codec.EncodeListItem(&buf, obj, negotiation.JSON); err != nil {
		return jsonItem{}, err
	}
	return jsonItem{whole: bytes.TrimSuffix(buf.Bytes(), []byte("\n"))}, nil
}

// jsonItem is a list item's JSON: head and rest, or whole.
type jsonItem struct {
	head        string
	rest, whole []byte
}

// size is the item's length.
func (it jsonItem) size() int {
	if it.whole != nil {
		return len(it.whole)
	}
	return len(it.head) + len(it.rest)
}

// parts are the item's bytes in order, for a writer taking them piece
// by piece; head and rest when sep is empty.
func (it jsonItem) parts(sep string) [3][]byte {
	if it.whole != nil {
		return [3][]byte{[]byte(sep), it.whole, nil}
	}
	return [3][]byte{[]byte(sep), []byte(it.head), it.rest}
}

// appendTo appends the item to dst.
func (it jsonItem) appendTo(dst []byte) []byte {
	if it.whole != nil {
		return append(dst, it.whole...)
	}
	return append(append(dst, it.head...), it.rest...)
}
