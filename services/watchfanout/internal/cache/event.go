package cache

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/watchframe"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// InitialEventsEndAnnotation marks the bookmark that ends the initial
// events of a watch with sendInitialEvents=true.
const InitialEventsEndAnnotation = "k8s.io/initial-events-end"

// Format is one wire format of frames. Each event memoizes one encoding
// per (Format, FrameKind), so N watchers of one format cost one encode.
type Format uint8

// The formats served.
const (
	FormatJSON Format = iota
	FormatProtobuf
	FormatTableNone
	FormatTableMetadata
	FormatTableObject
	numFormats
)

// Watchframe returns the watchframe format of f.
func (f Format) Watchframe() watchframe.Format {
	switch f {
	case FormatProtobuf:
		return watchframe.Format{MediaType: negotiation.Protobuf}
	case FormatTableNone:
		return watchframe.Format{MediaType: negotiation.JSON, Table: true, IncludeObject: metav1.IncludeNone}
	case FormatTableMetadata:
		return watchframe.Format{MediaType: negotiation.JSON, Table: true, IncludeObject: metav1.IncludeMetadata}
	case FormatTableObject:
		return watchframe.Format{MediaType: negotiation.JSON, Table: true, IncludeObject: metav1.IncludeObject}
	}
	return watchframe.Format{MediaType: negotiation.JSON}
}

// FrameKind is which watch event an Event becomes for one watcher.
type FrameKind uint8

// The kinds of frames.
const (
	// FrameAdded is ADDED with the event's object (a create, an object
	// entering a watcher's selectors, or an initial event).
	FrameAdded FrameKind = iota
	// FrameModified is MODIFIED with the event's object.
	FrameModified
	// FrameDeleted is DELETED with the event's object (for a delete, the
	// last state at the delete's revision).
	FrameDeleted
	// FrameDeletedPrev is DELETED with the previous state at the event's
	// revision: the object left the watcher's selectors (as kube-apiserver
	// reports it).
	FrameDeletedPrev
	// FrameBookmark is BOOKMARK.
	FrameBookmark
	numKinds
)

func (k FrameKind) eventType() watch.EventType {
	switch k {
	case FrameAdded:
		return watch.Added
	case FrameModified:
		return watch.Modified
	case FrameDeleted, FrameDeletedPrev:
		return watch.Deleted
	}
	return watch.Bookmark
}

// encoders holds one watchframe encoder per format of one resource. It is
// immutable.
type encoders [numFormats]*watchframe.Encoder

func newEncoders(c *codec.Codec, res *registry.Resource, now func() time.Time) *encoders {
	var e encoders
	for f := Format(0); f < numFormats; f++ {
		e[f] = watchframe.NewEncoder(c, res, f.Watchframe(), now)
	}
	return &e
}

// Event is one change of one object, or a bookmark, as the cache keeps it:
// in the resource's history, and (the last event of each key) as the key's
// current state.
//
// Obj and Prev are decoded once and never mutated afterwards: they are
// shared by every reader. Frames are encoded lazily, once per
// (format, kind), and the same bytes are handed to every watcher.
type Event struct {
	// Rev is the store revision of the change.
	Rev int64
	// Key is the store key; Namespace the object's namespace ("" when
	// cluster-scoped).
	Key, Namespace string
	// Obj is the state after the change; for a delete the last state with
	// resourceVersion = Rev; for a bookmark an empty object carrying Rev.
	Obj runtime.Object
	// Prev is the state before the change (resourceVersion = its own
	// revision); nil for a create, a delete, a bookmark and listed state.
	Prev runtime.Object
	// Deleted marks a delete; Bookmark a bookmark.
	Deleted, Bookmark bool

	at  time.Time // when the cache received it, for the history window
	enc *encoders

	mu        sync.Mutex     // serializes encoding
	prevAtRev runtime.Object // Prev at Rev; guarded by mu
	// frames are the frames encoded so far, the newest first; pushed
	// under mu, read without it.
	frames atomic.Pointer[frame]
}

// frame is one encoded frame of an Event; immutable once published.
//
// A list rather than an array of every (format, kind): an event is
// encoded in one or two of its 25 and the cache holds every object's
// last event (and the history), so an array of pointers cost 200 bytes
// per event, 2 MiB for 10,000 objects, mostly nil.
type frame struct {
	next *frame
	slot uint8
	data []byte
}

// find returns the frame of slot in the list from f, or nil.
func (f *frame) find(slot uint8) *frame {
	for ; f != nil; f = f.next {
		if f.slot == slot {
			return f
		}
	}
	return nil
}

// Frame returns the encoded watch frame of e as kind in format f. The bytes
// are shared: callers must not modify them.
func (e *Event) Frame(kind FrameKind, f Format) ([]byte, error) {
	slot := uint8(int(f)*int(numKinds) + int(kind))
	if fr := e.frames.Load().find(slot); fr != nil {
		return fr.data, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	head := e.frames.Load()
	if fr := head.find(slot); fr != nil {
		return fr.data, nil
	}
	obj := e.Obj
	if kind == FrameDeletedPrev {
		if e.prevAtRev == nil {
			if e.Prev == nil {
				return nil, fmt.Errorf("cache: event %d of %s has no previous state", e.Rev, e.Key)
			}
			p := e.Prev.DeepCopyObject()
			if err := setRV(p, e.Rev); err != nil {
				return nil, err
			}
			e.prevAtRev = p
		}
		obj = e.prevAtRev
	}
	data, err := e.enc[f].Frame(kind.eventType(), obj)
	if err != nil {
		return nil, fmt.Errorf("cache: encode %s: %w", e.Key, err)
	}
	e.frames.Store(&frame{next: head, slot: slot, data: data})
	return data, nil
}

func setRV(obj runtime.Object, rev int64) error {
	acc, err := meta.Accessor(obj)
	if err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	acc.SetResourceVersion(strconv.FormatInt(rev, 10))
	return nil
}

// newBookmark returns a bookmark event at rev for res; initialEnd adds the
// k8s.io/initial-events-end annotation.
func newBookmark(res *registry.Resource, enc *encoders, rev int64, initialEnd bool) (*Event, error) {
	obj := res.New()
	acc, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	acc.SetResourceVersion(strconv.FormatInt(rev, 10))
	if initialEnd {
		acc.SetAnnotations(map[string]string{InitialEventsEndAnnotation: "true"})
	}
	return &Event{Rev: rev, Obj: obj, Bookmark: true, enc: enc, at: time.Now()}, nil
}
