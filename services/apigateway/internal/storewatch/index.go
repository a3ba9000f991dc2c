package storewatch

import (
	"log/slog"
	"strings"
)

// Index keeps the objects a follower reads, decoded, by name (their key
// after the prefix followed). It is not safe for concurrent use: it
// belongs to the goroutine the follower delivers to.
type Index[T any] struct {
	prefix string
	decode func(value []byte, rev int64) (T, error)
	log    *slog.Logger
	// Objects are the objects held, by name.
	Objects map[string]T
}

// NewIndex returns an empty Index of the objects under prefix, decoded
// with decode; objects that do not decode are logged on log and left out.
func NewIndex[T any](prefix string, decode func(value []byte, rev int64) (T, error), log *slog.Logger) *Index[T] {
	return &Index[T]{prefix: prefix, decode: decode, log: log, Objects: map[string]T{}}
}

// Reset forgets every object (a new list begins).
func (x *Index[T]) Reset() { clear(x.Objects) }

// Put records the object stored under key at revision rev; a nil value
// deletes it.
func (x *Index[T]) Put(key string, value []byte, rev int64) {
	name := strings.TrimPrefix(key, x.prefix)
	if value == nil {
		delete(x.Objects, name)
		return
	}
	obj, err := x.decode(value, rev)
	if err != nil {
		x.log.Error("a stored object does not decode; leaving it out", "key", key, "error", err)
		delete(x.Objects, name)
		return
	}
	x.Objects[name] = obj
}

// Apply folds a Batch in: a listed batch replaces every object.
func (x *Index[T]) Apply(b Batch) {
	if b.Listed {
		x.Reset()
	}
	for _, ch := range b.Changes {
		x.Put(ch.Key, ch.Value, ch.Revision)
	}
}
