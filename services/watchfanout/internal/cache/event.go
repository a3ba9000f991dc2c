package cache

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/protolist"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/selection"
	"github.com/meridian-cp/meridian/lib/kube/watchframe"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// InitialEventsEndAnnotation marks the bookmark that ends the initial
// events of a watch with sendInitialEvents=true.
const InitialEventsEndAnnotation = "k8s.io/initial-events-end"

// Event is one change of one object, or a bookmark, as the cache keeps it:
// in the resource's history, and (the last event of each key) as the key's
// current state.
//
// Its objects are kept as the store holds them (see object) and shared
// by every reader. Protobuf frames of them are spliced into each batch
// (ProtoFrame); other frames are encoded lazily, once per (format,
// kind), and the same bytes are handed to every watcher (Frame).
type Event struct {
	// Rev is the store revision of the change.
	Rev int64
	// Key is the store key; Namespace the object's namespace ("" when
	// cluster-scoped).
	Key, Namespace string
	// own is obj's bytes when they are the envelope of a protobuf frame
	// of the event (obj spliceable, written at Rev: ADDED and MODIFIED,
	// listed state), else nil. Kept here, next to what a watcher reads
	// anyway, so that writing such a frame reads no more than the event
	// and these bytes: in a relist storm every watcher writes every
	// object's frame, and loading obj too would cost another cache line,
	// in another allocation, per frame — more than copying a small
	// object.
	own []byte
	// Deleted marks a delete; Bookmark a bookmark.
	Deleted, Bookmark bool

	// obj is the state after the change; for a delete the last state;
	// for a bookmark an empty object carrying Rev. Every frame and read
	// of it carries resourceVersion Rev.
	obj *object
	// prev is the state before the change; nil for a create, a delete, a
	// bookmark and listed state.
	prev *object

	at  time.Time // when the cache received it, for the history window
	enc *encoders

	mu sync.Mutex // serializes encoding
	// frames are the frames encoded so far, the newest first; pushed
	// under mu, read without it; emptied under mu by dropUnreadFrames.
	frames atomic.Pointer[frame]
	// runs are the compressed list runs starting at the event
	// (ListRun); set under mu, read without it, dropped with the frames.
	runs atomic.Pointer[listRuns]
	// read is set when a frame or the JSON of the event is asked for,
	// and cleared by dropUnreadFrames (frames.go).
	read atomic.Bool
}

// frame is one encoded frame of an Event; immutable once published.
//
// A list rather than an array of every (format, kind): an event is
// encoded in one or two of its 25 and the cache holds every object's
// last event (and the history), so an array of 25 pointers would add
// 200 bytes to every event, mostly nil.
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

// Object returns the state after the change (for a delete the last
// state), decoded, with resourceVersion Rev: a new object the caller
// owns, except for a bookmark's, which must not be modified.
func (e *Event) Object() (runtime.Object, error) { return e.obj.decode(e.enc, e.Rev) }

// Stored returns the state after the change as the cache keeps it, to
// splice with resourceVersion Rev (protolist); false when it is not in a
// spliceable form.
func (e *Event) Stored() (*protolist.Object, bool) {
	if !e.obj.spliceable {
		return nil, false
	}
	return &e.obj.po, true
}

// Envelope returns the protobuf envelope of the state after the change
// with resourceVersion Rev (a Get's response), in a new slice: the stored
// bytes when they are it (see own), else spliced from them — byte for
// byte what decoding and encoding give. False when the state is not
// spliceable: decode it (Object).
func (e *Event) Envelope() ([]byte, bool) {
	if e.own != nil {
		return slices.Clone(e.own), true
	}
	if !e.obj.spliceable {
		return nil, false
	}
	env := e.obj.po.Envelope(e.enc.apiVersion, e.enc.kind, e.Rev)
	return env.AppendTo(make([]byte, 0, env.Size())), true
}

// stateFor is the state that a frame of kind shows.
func (e *Event) stateFor(kind FrameKind) (*object, error) {
	if kind != FrameDeletedPrev {
		return e.obj, nil
	}
	if e.prev == nil {
		return nil, fmt.Errorf("cache: event %d of %s has no previous state", e.Rev, e.Key)
	}
	// Leaving the selectors: the previous state at the event's revision.
	return e.prev, nil
}

// ProtoFrame is a protobuf frame of an event, written from its stored
// object wherever it goes (AppendTo): a frame head and the object's bytes
// when the frame is at the object's own revision (ADDED and MODIFIED),
// else spliced with the frame's resourceVersion — byte for byte, either
// way, what Frame encodes.
//
// Why not Frame's memoized bytes: a frame kept per event doubles what
// the cache holds of an object for as long as any watcher may still want
// it — in a relist storm, until the storm is over — and the garbage
// collector's headroom doubles that again. Written into each batch, a
// frame is copied once, as a memoized one is, and kept nowhere.
type ProtoFrame struct {
	t watch.EventType
	// whole is the object's bytes when they are the frame's envelope;
	// else env is the envelope to splice.
	whole []byte
	env   protolist.Envelope
}

// ProtoFrame makes f the protobuf frame of e as kind, written from the
// stored object; false when the object is not spliceable (or kind is a
// bookmark): use Frame. (f is filled in place: it is made for every
// frame of every watcher.)
func (e *Event) ProtoFrame(kind FrameKind, f *ProtoFrame) bool {
	if e.own != nil && kind != FrameDeletedPrev && kind != FrameBookmark {
		f.t, f.whole = kind.eventType(), e.own
		return true
	}
	o, err := e.stateFor(kind)
	if err != nil || !o.spliceable || kind == FrameBookmark {
		return false
	}
	f.t = kind.eventType()
	if o.rev == e.Rev {
		f.whole = o.value
		return true
	}
	f.whole, f.env = nil, o.po.Envelope(e.enc.apiVersion, e.enc.kind, e.Rev)
	return true
}

// envSize is the size of the frame's envelope.
func (f *ProtoFrame) envSize() int {
	if f.whole != nil {
		return len(f.whole)
	}
	return f.env.Size()
}

// Size is the size of the frame.
func (f *ProtoFrame) Size() int { return watchframe.FrameSize(f.t, f.envSize()) }

// AppendTo appends the frame to dst.
func (f *ProtoFrame) AppendTo(dst []byte) []byte {
	dst = watchframe.AppendFrameHead(dst, f.t, f.envSize())
	if f.whole != nil {
		return append(dst, f.whole...)
	}
	return f.env.AppendTo(dst)
}

// Frame returns the encoded watch frame of e as kind in format f. The bytes
// are shared: callers must not modify them. (Protobuf frames of stored
// objects go straight into batches with ProtoFrame instead.)
func (e *Event) Frame(kind FrameKind, f Format) ([]byte, error) {
	e.markRead()
	slot := frameSlot(f, kind)
	if fr := e.frames.Load().find(slot); fr != nil {
		return fr.data, nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	head := e.frames.Load()
	if fr := head.find(slot); fr != nil {
		return fr.data, nil
	}
	var data []byte
	var pf ProtoFrame
	if f == FormatProtobuf && e.ProtoFrame(kind, &pf) {
		data = pf.AppendTo(make([]byte, 0, pf.Size()))
	} else if x, ok := e.siblingJSON(f, kind); ok {
		// The object's JSON is in a sibling frame (ADDED for a list, say,
		// where a relist's watcher wants ADDED, or MODIFIED where it wants
		// ADDED): the same object, in another event wrapper.
		data = watchframe.AppendJSONFrame(make([]byte, 0, watchframe.JSONFrameSize(kind.eventType(), len(x))), kind.eventType(), x)
	} else {
		o, err := e.stateFor(kind)
		if err != nil {
			return nil, err
		}
		obj, err := o.decode(e.enc, e.Rev)
		if err != nil {
			if o.err != nil {
				return nil, err // unreadable: the error names the key
			}
			return nil, fmt.Errorf("cache: decode %s: %w", e.Key, err)
		}
		if data, err = e.enc.f[f].Frame(kind.eventType(), obj); err != nil {
			return nil, fmt.Errorf("cache: encode %s: %w", e.Key, err)
		}
	}
	e.frames.Store(&frame{next: head, slot: slot, data: data})
	return data, nil
}

// ObjectJSON returns the JSON of the state after the change with
// resourceVersion Rev (for a delete, the last state at the delete's
// revision), as a JSON list holds it among its items: the object's own
// encoding without its trailing newline. The bytes are shared: callers
// must not modify them.
//
// A JSON ADDED, MODIFIED or DELETED frame is {"type":"…","object":X}
// followed by a newline, X being exactly these bytes (the encoder writes
// the object, then the event around it, compacted), so ObjectJSON is
// memoized inside the frames: X is read out of the event's JSON frame of
// its own type (or of one a watcher already asked for), which is encoded
// now if no watcher has. A list and every JSON watcher of an event then
// cost one decode, one encode and one copy of the bytes between them, and
// a list of unchanged objects costs no encoding at all — what
// kube-apiserver's watch cache does for its events (cachingObject), here
// for lists too. The bytes are kept while the event is a key's current
// state or in the history, and is read at least once per
// Options.FrameRetention (frames.go).
func (e *Event) ObjectJSON() ([]byte, error) {
	if e.Bookmark {
		return nil, fmt.Errorf("cache: a bookmark has no object")
	}
	if x, ok := e.memoizedJSON(); ok {
		e.markRead()
		return x, nil
	}
	// ADDED: the frame initial events (a relist) ask for, so that a list
	// and the relists after it share it; a live watcher of a change has
	// asked for its frame already, if it was to.
	own := FrameAdded
	if e.Deleted {
		own = FrameDeleted
	}
	data, err := e.Frame(own, FormatJSON)
	if err != nil {
		return nil, err
	}
	if x, ok := watchframe.JSONFrameObject(data, own.eventType()); ok {
		return x, nil
	}
	// Not of that shape (no encoder of this codec writes another): the
	// object alone, not memoized.
	obj, err := e.Object()
	if err != nil {
		return nil, err
	}
	x, err := e.enc.codec.EncodeToBytes(obj, negotiation.JSON)
	if err != nil {
		return nil, fmt.Errorf("cache: encode %s: %w", e.Key, err)
	}
	return bytes.TrimSuffix(x, []byte("\n")), nil
}

// memoizedJSON returns the object member of a JSON frame of the event's
// object already memoized, if there is one.
func (e *Event) memoizedJSON() ([]byte, bool) {
	head := e.frames.Load()
	for _, kind := range [...]FrameKind{FrameAdded, FrameModified, FrameDeleted} {
		if fr := head.find(frameSlot(FormatJSON, kind)); fr != nil {
			if x, ok := watchframe.JSONFrameObject(fr.data, kind.eventType()); ok {
				return x, true
			}
		}
	}
	return nil, false
}

// siblingJSON returns the object a JSON frame of kind in f would hold, if
// another frame of the event holds it already.
func (e *Event) siblingJSON(f Format, kind FrameKind) ([]byte, bool) {
	if f != FormatJSON || kind == FrameDeletedPrev || kind == FrameBookmark {
		return nil, false
	}
	return e.memoizedJSON()
}

// ListRun is a run of consecutive items of a list memoized as one
// compressed segment (gzsplice): Items are the objects it holds, in
// order, named by key and revision (one key at one revision is one
// object, and one list item), Segment their compressed bytes. A list
// whose next items are Items splices Segment instead of compressing them.
type ListRun struct {
	Items   []RunItem
	Segment []byte
}

// RunItem is one object of a ListRun.
type RunItem struct {
	Key string
	Rev int64
}

// listRuns are the runs memoized on an event, per list format and
// RunSlot.
type listRuns struct {
	json, protobuf [numRunSlots]*ListRun
}

// RunSlot tells apart the runs memoized on one event: a list that ends
// inside a run (a chunk) holds a shorter run than a list of the whole
// collection, and both are kept rather than replacing each other.
type RunSlot int

// The run slots.
const (
	// RunWhole is a run that ends where a run starts or where the
	// collection does.
	RunWhole RunSlot = iota
	// RunCut is a run cut short by a chunk's end.
	RunCut
	numRunSlots
)

// ListRun returns the run of list items in format f (FormatJSON or
// FormatProtobuf) and slot memoized on e, the run's first object, or nil.
func (e *Event) ListRun(f Format, slot RunSlot) *ListRun {
	rs := e.runs.Load()
	if rs == nil {
		return nil
	}
	e.markRead()
	if f == FormatProtobuf {
		return rs.protobuf[slot]
	}
	return rs.json[slot]
}

// SetListRun memoizes r as the run of list items in format f and slot
// starting at e, in place of the one before. Runs are kept and dropped as
// frames are (frames.go): while lists read them, each object costs its
// compressed share of a run plus a RunItem.
func (e *Event) SetListRun(f Format, slot RunSlot, r *ListRun) {
	e.markRead()
	e.mu.Lock()
	defer e.mu.Unlock()
	var rs listRuns
	if old := e.runs.Load(); old != nil {
		rs = *old
	}
	if f == FormatProtobuf {
		rs.protobuf[slot] = r
	} else {
		rs.json[slot] = r
	}
	e.runs.Store(&rs)
}

// Size is the size of the object after the change as the store holds it;
// 0 for a bookmark.
func (e *Event) Size() int { return e.size() }

// frameSlot is the slot of the frame of kind in format f.
func frameSlot(f Format, kind FrameKind) uint8 { return uint8(int(f)*int(numKinds) + int(kind)) }

// Matches reports whether f selects the state after the change.
func (e *Event) Matches(f *selection.Filter) bool {
	s := state{o: e.obj}
	return s.matches(e, f)
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
	return &Event{Rev: rev, obj: &object{fixed: obj}, Bookmark: true, enc: enc, at: time.Now()}, nil
}

// size is the bytes of the event's object as stored; 0 for a bookmark.
func (e *Event) size() int {
	if e.obj == nil {
		return 0
	}
	return len(e.obj.value)
}
