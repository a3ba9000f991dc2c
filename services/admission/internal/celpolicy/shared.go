package celpolicy

import (
	"errors"
	"reflect"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// sharedMap is a request's JSON object (a map[string]any decoded from
// the request) as a CEL map that every policy of the request reads: it
// behaves as cel-go's map over the same value, which it wraps and
// answers through, but keeps each field it converted (objects and
// arrays as sharedMap and sharedList in turn) and its keys as CEL
// strings, so the policies of one request convert each value they read
// once instead of once per read. Not safe for concurrent use: a
// request's policies are evaluated one at a time (see celInput).
type sharedMap struct {
	traits.Mapper
	fields map[string]ref.Val // converted values read so far
	keys   []ref.Val          // the keys, once iterated
	m      map[string]any
}

var (
	_ traits.Mapper   = (*sharedMap)(nil)
	_ traits.Foldable = (*sharedMap)(nil)
	_ traits.Lister   = (*sharedList)(nil)
	_ traits.Foldable = (*sharedList)(nil)
)

// share wraps v, cel-go's conversion of a JSON value, when it is an
// object or an array; other values are returned as they are.
func share(v ref.Val) ref.Val {
	switch t := v.(type) {
	case *sharedMap, *sharedList:
		return v
	case traits.Mapper:
		if m, ok := t.Value().(map[string]any); ok {
			return &sharedMap{Mapper: t, m: m}
		}
	case traits.Lister:
		if l, ok := t.Value().([]any); ok {
			return &sharedList{Lister: t, items: make([]ref.Val, len(l))}
		}
	}
	return v
}

// Find implements traits.Mapper.
func (s *sharedMap) Find(key ref.Val) (ref.Val, bool) {
	k, ok := key.(types.String)
	if !ok {
		return s.Mapper.Find(key)
	}
	if v, ok := s.fields[string(k)]; ok {
		return v, true
	}
	v, found := s.Mapper.Find(key)
	if !found {
		return v, found
	}
	v = share(v)
	if s.fields == nil {
		s.fields = make(map[string]ref.Val, len(s.m))
	}
	s.fields[string(k)] = v
	return v, true
}

// Get implements traits.Indexer.
func (s *sharedMap) Get(key ref.Val) ref.Val {
	if v, found := s.Find(key); found {
		return v
	}
	return s.Mapper.Get(key)
}

// keyList is the map's keys as CEL strings, made on first use.
func (s *sharedMap) keyList() []ref.Val {
	if s.keys == nil {
		s.keys = make([]ref.Val, 0, len(s.m))
		for k := range s.m {
			s.keys = append(s.keys, types.String(k))
		}
	}
	return s.keys
}

// Iterator implements traits.Iterable: the keys.
func (s *sharedMap) Iterator() traits.Iterator {
	return &sharedIterator{items: s.keyList()}
}

// Fold implements traits.Foldable: each key and its value.
func (s *sharedMap) Fold(f traits.Folder) {
	for _, k := range s.keyList() {
		v, _ := s.Find(k)
		if !f.FoldEntry(k, v) {
			return
		}
	}
}

// IsZeroValue reports whether the map is empty, as cel-go's map does.
func (s *sharedMap) IsZeroValue() bool { return len(s.m) == 0 }

// String is the map as cel-go's map writes it.
func (s *sharedMap) String() string { return stringOf(s.Mapper) }

// sharedList is a request's JSON array as sharedMap is its objects: its
// items converted once.
type sharedList struct {
	traits.Lister
	items []ref.Val // nil entries: not converted yet
}

// Get implements traits.Indexer.
func (s *sharedList) Get(index ref.Val) ref.Val {
	i, ok := index.(types.Int)
	if !ok || i < 0 || int64(i) >= int64(len(s.items)) {
		return s.Lister.Get(index)
	}
	if v := s.items[i]; v != nil {
		return v
	}
	v := share(s.Lister.Get(index))
	s.items[i] = v
	return v
}

// Iterator implements traits.Iterable: the items.
func (s *sharedList) Iterator() traits.Iterator {
	return &sharedListIterator{list: s}
}

// Fold implements traits.Foldable: each index and its item.
func (s *sharedList) Fold(f traits.Folder) {
	for i := range s.items {
		if !f.FoldEntry(types.Int(i), s.Get(types.Int(i))) {
			return
		}
	}
}

// IsZeroValue reports whether the list is empty, as cel-go's list does.
func (s *sharedList) IsZeroValue() bool { return len(s.items) == 0 }

// String is the list as cel-go's list writes it.
func (s *sharedList) String() string { return stringOf(s.Lister) }

// stringOf is v's String, as fmt would write it.
func stringOf(v ref.Val) string {
	if s, ok := v.(interface{ String() string }); ok {
		return s.String()
	}
	return ""
}

// sharedIterator iterates over values already converted.
type sharedIterator struct {
	baseIterator
	items []ref.Val
	i     int
}

func (it *sharedIterator) HasNext() ref.Val { return types.Bool(it.i < len(it.items)) }

func (it *sharedIterator) Next() ref.Val {
	if it.i >= len(it.items) {
		return nil
	}
	it.i++
	return it.items[it.i-1]
}

// sharedListIterator iterates over a sharedList's items.
type sharedListIterator struct {
	baseIterator
	list *sharedList
	i    int
}

func (it *sharedListIterator) HasNext() ref.Val { return types.Bool(it.i < len(it.list.items)) }

func (it *sharedListIterator) Next() ref.Val {
	if it.i >= len(it.list.items) {
		return nil
	}
	it.i++
	return it.list.Get(types.Int(it.i - 1))
}

// baseIterator is the ref.Val side of the iterators, as cel-go's
// iterators answer it.
type baseIterator struct{}

func (baseIterator) ConvertToNative(reflect.Type) (any, error) {
	return nil, errors.New("type conversion on iterators not supported")
}

func (baseIterator) ConvertToType(ref.Type) ref.Val { return types.NewErr("no such overload") }

func (baseIterator) Equal(ref.Val) ref.Val { return types.NewErr("no such overload") }

func (baseIterator) Type() ref.Type { return types.IteratorType }

func (baseIterator) Value() any { return nil }
