package cache

import (
	"errors"
	"sync"

	"github.com/meridian-cp/meridian/lib/kube/selection"
)

// Reasons a watcher is terminated by the cache.
var (
	// ErrTooSlow: the watcher's buffer overflowed. The client should
	// re-watch from the resourceVersion of the last event it received.
	ErrTooSlow = errors.New("watchfanout: watcher fell behind")
	// ErrReset: the cache re-listed from the store (it fell behind
	// compaction), so the watcher may have missed events; the client must
	// re-list.
	ErrReset = errors.New("watchfanout: cache re-listed from the store")
	// ErrClosed: the cache shut down.
	ErrClosed = errors.New("watchfanout: cache closed")
	// ErrGone: the resource is no longer served as it was: its CRD was
	// deleted, or changed how it is served (custom.go). The watch ends as
	// kube-apiserver ends the watches of a CRD's old storage; the client
	// re-watches.
	ErrGone = errors.New("watchfanout: the resource's CustomResourceDefinition changed")
)

// Item is one queued delivery: an event and how this watcher sees it.
type Item struct {
	Ev   *Event
	Kind FrameKind
}

// Watcher is one watch registered with a Resource.
//
// The dispatcher (the cache's apply goroutine, holding the resource's
// lock) pushes items and then calls the watch's OnPending; the watch takes
// them with TryNext from whatever goroutine it likes. A push never blocks:
// when the queue holds limit items the watcher is terminated with
// ErrTooSlow and removed from the resource, so a slow watcher costs at
// most limit item references and never delays others.
//
// No goroutine waits on a Watcher: an idle watch is this struct, its
// filter and an empty queue.
type Watcher struct {
	// Immutable after registration; read by the dispatcher.
	ns        string
	filter    *selection.Filter
	bookmarks bool
	after     int64 // events at or below this revision are not delivered
	limit     int
	res       *Resource
	key       watchKey // where the resource files it (see watcherSet)

	// sent is the revision of the last item pushed (or replayed); guarded
	// by the resource's mu. Bookmarks never go below it.
	sent int64

	onPending func()

	mu struct {
		sync.Mutex
		queue  []Item
		err    error // set once when terminated
		closed bool  // unregistered, by Close or termination
	}
}

// kindFor decides what the event of v is for w: nothing, or one kind of
// frame, with selector transitions (entering the selectors is ADDED,
// leaving DELETED).
func (w *Watcher) kindFor(v *view) (FrameKind, bool) { return w.kindAfter(v, w.after) }

// kindAfter is kindFor for a watch that starts after revision after. It
// is the one place that decides whether an event concerns a watch, live
// (dispatch) or replayed from the history (Subscription.Kind): an object
// of another namespace than the watch's never does, nor one its selectors
// did not select before or after the change.
func (w *Watcher) kindAfter(v *view, after int64) (FrameKind, bool) {
	ev := v.ev
	if ev.Bookmark {
		// Never below what the watcher has been sent.
		return FrameBookmark, w.bookmarks && ev.Rev >= max(w.sent, after)
	}
	if ev.Rev <= after {
		return 0, false
	}
	if w.ns != "" && ev.Namespace != w.ns {
		// The index offers a live event only to the watchers of its
		// namespace, but the history a watch replays holds every
		// namespace's events.
		return 0, false
	}
	if ev.Deleted {
		return FrameDeleted, v.cur.matches(ev, w.filter)
	}
	cur := v.cur.matches(ev, w.filter)
	prev := ev.prev != nil && v.prev.matches(ev, w.filter)
	switch {
	case cur && prev:
		return FrameModified, true
	case cur:
		return FrameAdded, true
	case prev:
		return FrameDeletedPrev, true
	}
	return 0, false
}

// push queues it; false when the queue overflowed and w was terminated
// (the caller, holding the resource lock, removes w).
func (w *Watcher) push(it Item) bool {
	w.mu.Lock()
	if w.mu.closed {
		w.mu.Unlock()
		return true
	}
	if len(w.mu.queue) >= w.limit {
		w.mu.queue = nil
		w.mu.err = ErrTooSlow
		w.mu.closed = true
		w.mu.Unlock()
		w.signal()
		return false
	}
	w.mu.queue = append(w.mu.queue, it)
	w.mu.Unlock()
	w.signal()
	return true
}

// signal tells the watch that TryNext has something for it.
func (w *Watcher) signal() { w.onPending() }

// terminate ends w with err (queued items are dropped).
func (w *Watcher) terminate(err error) {
	w.mu.Lock()
	if w.mu.err == nil {
		w.mu.err = err
	}
	w.mu.closed = true
	w.mu.queue = nil
	w.mu.Unlock()
	w.signal()
}

// TryNext returns the queued items without waiting, none when the queue
// is empty, and the termination error once w was terminated. The items
// are returned in a slice the caller owns; buf (emptied) becomes the next
// queue, so a busy watcher that hands back its last batch allocates
// nothing per batch.
func (w *Watcher) TryNext(buf []Item) ([]Item, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.mu.err != nil {
		return nil, w.mu.err
	}
	if len(w.mu.queue) == 0 {
		return buf[:0], nil
	}
	q := w.mu.queue
	w.mu.queue = buf[:0]
	return q, nil
}

// Pending reports whether TryNext has items or an error to return.
func (w *Watcher) Pending() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mu.err != nil || len(w.mu.queue) > 0
}

// Close unregisters w. It is safe to call more than once and concurrently
// with dispatch.
func (w *Watcher) Close() {
	w.mu.Lock()
	closed := w.mu.closed
	w.mu.closed = true
	w.mu.queue = nil
	w.mu.Unlock()
	if !closed {
		w.res.unregister(w, "")
	}
}
