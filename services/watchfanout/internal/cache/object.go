package cache

import (
	"fmt"

	"github.com/meridian-cp/meridian/lib/kube/protolist"
	"k8s.io/apimachinery/pkg/runtime"
)

// object is one state of an object as the cache keeps it: the value the
// store holds, with its resourceVersion filled in (for a built-in kind,
// its protobuf envelope), not the decoded object, which takes about
// twice the memory.
//
// A protobuf frame of the object at its own revision is a frame head and
// these bytes, written straight into each batch; at another revision (a
// delete's, a watcher leaving the selectors) and in protobuf lists it is
// spliced with that resourceVersion (package protolist) — byte for byte,
// either way, what decoding and encoding give. The object is decoded only
// for JSON and Table frames, reads in JSON and selectors on a kind's own
// fields.
//
// An object is immutable and shared: by the event that wrote it, the next
// event of its key (as its previous state) and every reader; value is
// never modified.
type object struct {
	// value is the stored value, in its spliceable form with
	// resourceVersion rev; nil for a bookmark's object.
	value      []byte
	rev        int64
	spliceable bool
	// po is value parsed for splicing, valid when spliceable (the plain
	// protobuf form of the kind); it refers into value.
	po protolist.Object
	// fixed is a bookmark's object, with its resourceVersion; it is
	// never modified either.
	fixed runtime.Object
	// err is why the stored value could not be read (it did not
	// decrypt): every read of the object fails with it, so that a list
	// or watch that includes the object fails rather than leaving it
	// out. value is nil then.
	err error
}

// unreadable is the object of a stored value that could not be
// decrypted.
func unreadable(rev int64, err error) *object { return &object{rev: rev, err: err} }

// newObject builds the object of a stored value of res written at
// revision rev; it takes value over (and may write to it). It is decoded
// once to check that it can be, so that the decodings later do not fail.
//
// scratch, if not nil, is a buffer newObject may keep for the next call
// (the caller's goroutine's own): with it, the envelope with the
// resourceVersion is written back into value's own allocation when that
// has room (its size class rounds it up), rather than into a new one.
// That keeps the values in the order the store watch delivered them: a
// new allocation per write, of the same size as the value the response
// decoded, would leave every other block of that size class garbage for
// later values to fill in no order, and a relist storm, which reads every
// value once per watcher, copies values scattered over the heap several
// times slower than values laid out in order.
func newObject(enc *encoders, value []byte, rev int64, scratch *[]byte) (*object, error) {
	o := &object{value: value, rev: rev}
	gvk := enc.res.GVK()
	if po, err := protolist.Parse(value, gvk); err == nil {
		// The envelope with the resourceVersion, as a Get or a watch
		// event at rev sends it: a frame is then a head and these bytes.
		env := po.Envelope(enc.apiVersion, enc.kind, rev)
		var withRV []byte
		if scratch != nil && env.Size() <= cap(value) {
			// In place, through scratch: the envelope reads value.
			*scratch = env.AppendTo((*scratch)[:0])
			withRV = append(value[:0], *scratch...)
		} else {
			withRV = env.AppendTo(make([]byte, 0, env.Size()))
		}
		if po, err = protolist.Parse(withRV, gvk); err == nil {
			o.value, o.po, o.spliceable = withRV, po, true
		}
	}
	if _, err := o.decodeRaw(enc, rev); err != nil {
		return nil, err
	}
	return o, nil
}

// ownEnvelope returns what Event.own is for an event at rev whose state
// is o.
func ownEnvelope(o *object, rev int64) []byte {
	if o != nil && o.spliceable && o.rev == rev {
		return o.value
	}
	return nil
}

// decode returns a new decoded copy of o with resourceVersion rev (a
// bookmark's shared object, for a bookmark: not to be modified), as
// clients see it: a custom resource with its schema's defaults
// (registry.Resource.DefaultOnRead). Every frame, read and selector
// decodes through here, and each encoding of an event is made once from
// one decoded copy, so defaults are applied once per copy, never on top
// of an encoding.
func (o *object) decode(enc *encoders, rev int64) (runtime.Object, error) {
	obj, err := o.decodeRaw(enc, rev)
	if err != nil || o.fixed != nil {
		return obj, err
	}
	enc.res.DefaultOnRead(obj)
	return obj, nil
}

// decodeRaw is decode without the defaults: what is stored.
func (o *object) decodeRaw(enc *encoders, rev int64) (runtime.Object, error) {
	if o.fixed != nil {
		return o.fixed, nil
	}
	if o.err != nil {
		return nil, o.err
	}
	obj := enc.res.New()
	if err := enc.codec.DecodeStorage(o.value, rev, obj); err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	// Set apiVersion/kind, as the encoders expect.
	if err := enc.codec.SetKind(obj); err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	return obj, nil
}
