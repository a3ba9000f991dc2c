package cache

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/btree"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/selection"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// ExpiredError is returned by Watch for a revision older than the history.
type ExpiredError struct {
	// Requested is the revision asked for; Oldest the oldest revision the
	// history can serve changes after.
	Requested, Oldest int64
}

func (e *ExpiredError) Error() string {
	return fmt.Sprintf("too old resource version: %d (%d)", e.Requested, e.Oldest)
}

func lessEvent(a, b *Event) bool { return a.Key < b.Key }

// tree is the current state of one resource, ordered by key. Its items are
// the last event of each live key.
type tree = btree.BTreeG[*Event]

// Resource is the cache of one served resource: current state, a bounded
// history of events, and the watchers to fan events out to.
//
// Lock rules: mu guards everything below it. The cache's apply goroutine
// is the only writer (apply, advance, bookmark, reset); it holds mu while
// it updates state and history and pushes to watchers, which never blocks.
// Readers hold mu only to look up a key, clone the tree (O(1),
// copy-on-write) or register a watcher. Never take Cache.revMu while
// holding mu.
type Resource struct {
	res  *registry.Resource
	enc  *encoders
	opts *Options
	m    *resourceMetrics
	// born is the revision a custom resource made while the cache
	// followed the store was loaded at (custom.go): its state holds
	// every event up to it, so the store watch's events at or before it
	// are not applied again. 0 for the others. Set before the resource
	// is published, then read by the apply goroutine only.
	born int64

	// endBookmark is the last initial-events-end bookmark (see Bookmark).
	endBookmark atomic.Pointer[Event]
	// everything is the filter without selectors, shared by the watches
	// and lists that have none (a filter is immutable); nil if it could
	// not be built.
	everything *selection.Filter

	mu struct {
		sync.RWMutex
		state *tree
		// rev is the revision the state reflects: every event up to it is
		// applied.
		rev int64
		// hist holds the events after histStart in revision order, from
		// hist[head].
		hist      []*Event
		head      int
		histStart int64
		// watchers, by namespace and what their selectors pin.
		watchers  *watcherSet
		snapshots map[int64]*keptSnapshot
		closed    bool // no watcher may register any more
		// clone is a copy-on-write clone of state, and snap the last
		// snapshot, both shared until state changes (then nil: kept, a
		// clone would pin the replaced events): a relist storm's
		// thousands of watches start from one snapshot rather than a
		// tree header and a snapshot each.
		clone *tree
		snap  *Snapshot
		// counts are what lists learned of clone's state (keyCounts),
		// shared and reset with it.
		counts *keyCounts
	}
}

type keptSnapshot struct {
	snap *Snapshot
	used time.Time
}

func newResource(res *registry.Resource, enc *encoders, opts *Options, m *resourceMetrics) *Resource {
	r := &Resource{res: res, enc: enc, opts: opts, m: m}
	r.mu.state = btree.NewG(32, lessEvent)
	r.mu.watchers = newWatcherSet()
	r.mu.snapshots = map[int64]*keptSnapshot{}
	if f, err := selection.New(res, "", ""); err == nil {
		r.everything = f
	}
	return r
}

// Everything returns the filter without selectors, shared by all its
// users (thousands of watches in a relist storm), or nil.
func (r *Resource) Everything() *selection.Filter { return r.everything }

// Registry returns the served resource.
func (r *Resource) Registry() *registry.Resource { return r.res }

// namespaceOf returns the namespace part of key ("" when cluster-scoped).
func (r *Resource) namespaceOf(key string) string {
	if !r.res.Namespaced {
		return ""
	}
	rest := strings.TrimPrefix(key, r.res.KeyPrefix(""))
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		return rest[:i]
	}
	return ""
}

// change is one store event for a resource: obj is the new state, nil
// for a delete.
type change struct {
	key string
	rev int64
	obj *object
}

// applyBatch records changes (in revision order) and then that every event
// up to complete has been applied, in one critical section, so no reader
// sees part of a batch. Called by the apply goroutine only.
func (r *Resource) applyBatch(chs []change, complete int64, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ch := range chs {
		r.applyLocked(ch, now)
	}
	r.m.received.Add(float64(len(chs)))
	r.m.objects.Set(float64(r.mu.state.Len()))
	r.m.storage.Set(float64(r.mu.state.Len()))
	r.advanceLocked(complete, now)
}

func (r *Resource) applyLocked(ch change, now time.Time) {
	r.mu.clone, r.mu.snap, r.mu.counts = nil, nil, nil // the state changes
	prev, had := r.mu.state.Get(&Event{Key: ch.key})
	ev := &Event{Rev: ch.rev, Key: ch.key, Namespace: r.namespaceOf(ch.key), obj: ch.obj, own: ownEnvelope(ch.obj, ch.rev), enc: r.enc, at: now}
	if had {
		ev.prev = prev.obj
	}
	if ch.obj == nil {
		if !had {
			// A delete of a key the cache never saw: nobody can have seen it.
			return
		}
		// The last state, shared: its frames and reads carry the
		// delete's revision (an object's resourceVersion is not in
		// what the store holds).
		ev.obj, ev.prev, ev.Deleted = prev.obj, nil, true
		r.mu.state.Delete(prev)
	} else {
		r.mu.state.ReplaceOrInsert(ev)
	}
	r.mu.hist = append(r.mu.hist, ev)
	r.dispatchLocked(ev)
}

// advance records that every event up to rev has been applied, and trims
// the history. Called by the apply goroutine only.
func (r *Resource) advance(rev int64, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.advanceLocked(rev, now)
}

func (r *Resource) advanceLocked(rev int64, now time.Time) {
	if rev > r.mu.rev {
		r.mu.rev = rev
	}
	cutoff := now.Add(-r.opts.HistoryWindow)
	for r.mu.head < len(r.mu.hist) {
		ev := r.mu.hist[r.mu.head]
		if len(r.mu.hist)-r.mu.head <= r.opts.HistoryMaxEvents && !ev.at.Before(cutoff) {
			break
		}
		r.mu.histStart = ev.Rev
		r.mu.hist[r.mu.head] = nil
		r.mu.head++
	}
	if r.mu.head > 1024 && r.mu.head > len(r.mu.hist)/2 {
		n := copy(r.mu.hist, r.mu.hist[r.mu.head:])
		clear(r.mu.hist[n:])
		r.mu.hist, r.mu.head = r.mu.hist[:n], 0
	}
	r.m.history.Set(float64(len(r.mu.hist) - r.mu.head))
	for rv, k := range r.mu.snapshots {
		if now.Sub(k.used) > r.opts.SnapshotTTL {
			delete(r.mu.snapshots, rv)
		}
	}
}

// reset replaces the state with a fresh list at rev and empties the
// history; every watcher is terminated with ErrReset (it may have missed
// events). Called by the apply goroutine only.
func (r *Resource) reset(state *tree, rev int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.state = state
	r.mu.clone, r.mu.snap, r.mu.counts = nil, nil, nil
	r.mu.rev = rev
	clear(r.mu.hist)
	r.mu.hist, r.mu.head, r.mu.histStart = r.mu.hist[:0], 0, rev
	r.mu.snapshots = map[int64]*keptSnapshot{}
	r.mu.watchers.all(func(w *Watcher) {
		w.terminate(ErrReset)
		r.m.terminated(ErrReset)
	})
	r.mu.watchers = newWatcherSet()
	r.m.watchers.Set(0)
	r.m.objects.Set(float64(state.Len()))
	r.m.storage.Set(float64(state.Len()))
	r.m.history.Set(0)
}

// bookmark sends a BOOKMARK at the current revision to every watcher that
// allows bookmarks. Called by the apply goroutine only.
func (r *Resource) bookmark() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.watchers.len() == 0 {
		return nil
	}
	ev, err := newBookmark(r.res, r.enc, r.mu.rev, false)
	if err != nil {
		return err
	}
	v := newView(ev)
	r.mu.watchers.all(func(w *Watcher) { r.offerLocked(w, &v) })
	return nil
}

func (r *Resource) dispatchLocked(ev *Event) {
	n := 0
	v := newView(ev)
	r.mu.watchers.forEvent(&v, func(w *Watcher) { n += r.offerLocked(w, &v) })
	if n > 0 {
		r.m.events.Add(float64(n))
		size := float64(ev.size())
		for range n {
			r.m.sizes.Observe(size)
		}
	}
}

// offerLocked queues the event of v to w if it concerns w; 1 when queued.
// A watcher whose queue overflows is terminated and unregistered.
func (r *Resource) offerLocked(w *Watcher, v *view) int {
	ev := v.ev
	kind, ok := w.kindFor(v)
	if !ok {
		return 0
	}
	if !w.push(Item{Ev: ev, Kind: kind}) {
		r.m.terminated(ErrTooSlow)
		r.unregisterLocked(w)
		return 0
	}
	w.sent = ev.Rev
	return 1
}

// WatchOptions describe a watch.
type WatchOptions struct {
	// Namespace limits the watch; "" is every namespace.
	Namespace string
	// Filter selects objects; required.
	Filter *selection.Filter
	// Bookmarks asks for periodic bookmarks.
	Bookmarks bool
	// Initial starts with the current state: Subscription.Initial is a
	// snapshot, and changes after its revision follow.
	Initial bool
	// After, without Initial, starts with the changes after this revision;
	// negative means after the current revision.
	After int64
	// OnPending is called whenever the watcher has something for TryNext:
	// items were queued, or it was terminated. Required. The dispatcher
	// calls it holding the resource's lock, so it must not block or call
	// into the cache.
	OnPending func()
}

// Subscription is a registered watch and what it must send before its
// queued events.
type Subscription struct {
	*Watcher
	// Rev is the revision the watch starts after: the snapshot's revision
	// with Initial, else the requested one (or the current one).
	Rev int64
	// Initial is the state at Rev, with WatchOptions.Initial.
	Initial *Snapshot
	// Replay are the history events after the requested revision that
	// precede the queued events (already in order), of every namespace
	// and every object: send only those Kind accepts.
	Replay []*Event

	from int64 // the requested revision of Replay
}

// Kind decides what ev, an event of Replay, is for this watch, by the
// rules live events follow (namespace, selectors, transitions; see
// Watcher.kindAfter).
func (s *Subscription) Kind(ev *Event) (FrameKind, bool) {
	v := newView(ev)
	return s.kindAfter(&v, s.from)
}

// Sent records ev, an event of Initial or of Replay that Kind accepted,
// as sent to the watch: apiserver_watch_events_total and
// apiserver_watch_events_sizes count it as dispatchLocked counts a live
// event, as kube-apiserver counts every event a watch is sent.
func (s *Subscription) Sent(ev *Event) {
	s.res.m.events.Inc()
	s.res.m.sizes.Observe(float64(ev.size()))
}

// Watch registers a watch. It returns *ExpiredError when opts.After is
// older than the history, ErrClosed once the cache stopped. The caller must Close the subscription.
func (r *Resource) Watch(opts WatchOptions) (*Subscription, error) {
	ns := opts.Namespace
	if !r.res.Namespaced {
		ns = ""
	}
	if opts.OnPending == nil {
		return nil, errors.New("cache: WatchOptions.OnPending is required")
	}
	w := &Watcher{ns: ns, filter: opts.Filter, bookmarks: opts.Bookmarks, limit: r.opts.WatcherBuffer, res: r, onPending: opts.OnPending}
	w.key = keyFor(w)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.closed {
		return nil, ErrClosed
	}
	sub := &Subscription{Watcher: w}
	switch {
	case opts.Initial:
		sub.Initial = r.snapshotLocked(ns)
		w.after = r.mu.rev
	case opts.After < 0:
		w.after = r.mu.rev
	default:
		if opts.After < r.mu.histStart {
			return nil, &ExpiredError{Requested: opts.After, Oldest: r.mu.histStart}
		}
		hist := r.mu.hist[r.mu.head:]
		i := sort.Search(len(hist), func(i int) bool { return hist[i].Rev > opts.After })
		sub.Replay = append([]*Event(nil), hist[i:]...)
		sub.from = opts.After
		w.after = max(opts.After, r.mu.rev)
	}
	sub.Rev = w.after
	w.sent = w.after
	if n := len(sub.Replay); n > 0 && sub.Replay[n-1].Rev > w.sent {
		w.sent = sub.Replay[n-1].Rev
	}
	if opts.After > sub.Rev {
		sub.Rev = opts.After
	}
	r.mu.watchers.add(w)
	r.m.watchers.Inc()
	return sub, nil
}

// unregister removes w; reason is only for the log of metrics ("" when
// the watch ended by itself).
func (r *Resource) unregister(w *Watcher, _ string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unregisterLocked(w)
}

func (r *Resource) unregisterLocked(w *Watcher) {
	if r.mu.watchers.remove(w) {
		r.m.watchers.Dec()
	}
}

// Rev returns the revision the resource's state reflects.
func (r *Resource) Rev() int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.mu.rev
}

// Get returns the current state of key (nil when absent) and the revision
// the state reflects.
func (r *Resource) Get(key string) (*Event, int64) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	ev, _ := r.mu.state.Get(&Event{Key: key})
	return ev, r.mu.rev
}

// closeWatchers terminates every watcher with err (ErrClosed: the cache
// stopped; ErrGone: the resource is no longer served), and refuses new
// ones.
func (r *Resource) closeWatchers(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.closed = true
	r.mu.watchers.all(func(w *Watcher) { w.terminate(err) })
	// Sub, not Set(0): a Resource that replaces this one (a CRD changed)
	// shares the series and may have watchers already.
	r.m.watchers.Sub(float64(r.mu.watchers.len()))
	r.mu.watchers = newWatcherSet()
}

// Bookmark returns a bookmark event at rev for one watch (it is not
// dispatched); initialEnd annotates it k8s.io/initial-events-end.
//
// The last initial-events-end bookmark is kept and returned again for
// the same rev: the watches of a relist storm all end their initial
// events at the same revision, and share one event and its frames
// instead of building and encoding one each.
func (r *Resource) Bookmark(rev int64, initialEnd bool) (*Event, error) {
	if !initialEnd {
		return newBookmark(r.res, r.enc, rev, false)
	}
	if ev := r.endBookmark.Load(); ev != nil && ev.Rev == rev {
		return ev, nil
	}
	ev, err := newBookmark(r.res, r.enc, rev, true)
	if err != nil {
		return nil, err
	}
	r.endBookmark.Store(ev)
	return ev, nil
}

// ErrorFrame encodes an ERROR event carrying st in format f.
func (r *Resource) ErrorFrame(f Format, st *metav1.Status) ([]byte, error) {
	return r.enc.f[f].Frame(watch.Error, st)
}

// Resource returns the resource the subscription watches.
func (s *Subscription) Resource() *Resource { return s.res }
