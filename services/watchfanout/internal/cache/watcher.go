package cache

import (
	"context"
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
)

// Item is one queued delivery: an event and how this watcher sees it.
type Item struct {
	Ev   *Event
	Kind FrameKind
}

// Watcher is one watch registered with a Resource.
//
// The dispatcher (the cache's apply goroutine, holding the resource's
// lock) pushes items; the watch's own goroutine takes them with Next. A
// push never blocks: when the queue holds limit items the watcher is
// terminated with ErrTooSlow and removed from the resource, so a slow
// watcher costs at most limit item references and never delays others.
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

	notify chan struct{} // capacity 1: "the queue changed"

	mu struct {
		sync.Mutex
		queue  []Item
		err    error // set once when terminated
		closed bool  // unregistered, by Close or termination
	}
}

// kindFor decides what ev is for w: nothing, or one kind of frame, with
// selector transitions (entering the selectors is ADDED, leaving DELETED).
func (w *Watcher) kindFor(ev *Event) (FrameKind, bool) { return w.kindAfter(ev, w.after) }

// kindAfter is kindFor for a watch that starts after revision after.
func (w *Watcher) kindAfter(ev *Event, after int64) (FrameKind, bool) {
	if ev.Bookmark {
		// Never below what the watcher has been sent.
		return FrameBookmark, w.bookmarks && ev.Rev >= max(w.sent, after)
	}
	if ev.Rev <= after {
		return 0, false
	}
	if ev.Deleted {
		return FrameDeleted, w.filter.Matches(ev.Obj)
	}
	cur := w.filter.Matches(ev.Obj)
	prev := ev.Prev != nil && w.filter.Matches(ev.Prev)
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

func (w *Watcher) signal() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

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

// Next waits until items are queued and returns them, appended to buf[:0]
// (the caller reuses buf between calls). It returns the termination error
// once w was terminated, and ctx's error when ctx ends.
func (w *Watcher) Next(ctx context.Context, buf []Item) ([]Item, error) {
	for {
		w.mu.Lock()
		if w.mu.err != nil {
			err := w.mu.err
			w.mu.Unlock()
			return nil, err
		}
		if len(w.mu.queue) > 0 {
			q := w.mu.queue
			// Hand the queue over and keep the caller's buffer as the next
			// queue, so a busy watcher allocates nothing per batch.
			w.mu.queue = buf[:0]
			w.mu.Unlock()
			return q, nil
		}
		w.mu.Unlock()
		select {
		case <-w.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Notify returns a channel that receives when items may be queued; use it
// with Pending to multiplex with other channels.
func (w *Watcher) Notify() <-chan struct{} { return w.notify }

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
