// Package watch fans committed events out to watchers.
//
// A watcher starts at a revision. It is registered with the hub first (so
// live events from then on are queued for it), then it replays the history
// up to the registration point from a pebble snapshot pinned at
// registration, then it sends the queued live events. The registration
// point is the hub's published revision R, read under the hub lock: the
// history holds every event at or below R (events are published only after
// they are committed) and every event above R arrives live, so the stream
// has no gap and no duplicate.
//
// Every watcher has a bounded queue. Publish never blocks: a watcher whose
// queue is full is cancelled with the reason "watcher is too slow" and must
// watch again from the revision after the last event it received.
package watch

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/mvcc"
)

// Cancel reasons sent to watchers the hub ends.
const (
	ReasonTooSlow  = "watcher is too slow"
	ReasonShutdown = "store is shutting down"
	ReasonRestored = "store state was replaced by a raft snapshot; watch again"
)

// ErrClosed is returned by Watch after Close.
var ErrClosed = errors.New("watch: hub is closed")

// HistorySource opens point-in-time views of the event history
// (*mvcc.Store).
type HistorySource interface {
	OpenHistory() *mvcc.History
}

// Options configure a Hub. The zero value of each field means its default.
type Options struct {
	// BufferSize is how many publications may wait in a watcher's queue
	// before it is cancelled as too slow. Default 1024.
	BufferSize int
	// ProgressInterval is the period of progress notifications for
	// watchers that asked for them. Default 5s.
	ProgressInterval time.Duration
	// MaxEventsPerResponse caps the events of one WatchResponse. Default 1000.
	MaxEventsPerResponse int
	// MaxResponseBytes caps the approximate payload of one WatchResponse
	// (a single larger event is still sent alone). Default 1 MiB.
	MaxResponseBytes int
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Registerer receives the hub's metrics; nil registers none.
	Registerer prometheus.Registerer
}

func (o *Options) ensureDefaults() {
	if o.BufferSize <= 0 {
		o.BufferSize = 1024
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = 5 * time.Second
	}
	if o.MaxEventsPerResponse <= 0 {
		o.MaxEventsPerResponse = 1000
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = 1 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Hub holds the registered watchers and the published revision.
type Hub struct {
	src     HistorySource
	opts    Options
	metrics *metrics

	// mu protects everything below and each registered watcher's caughtUp.
	// Publish holds it while queueing, so a watcher's queue and rev move
	// together.
	mu       sync.Mutex
	rev      int64
	watchers map[*Watcher]struct{}
	closed   bool
}

// New returns a hub whose published revision starts at rev (the store's
// current revision when the hub starts).
func New(src HistorySource, rev int64, opts Options) (*Hub, error) {
	opts.ensureDefaults()
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	return &Hub{src: src, opts: opts, metrics: m, rev: rev, watchers: make(map[*Watcher]struct{})}, nil
}

// Rev returns the last published revision.
func (h *Hub) Rev() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rev
}

// Publish announces that everything up to rev is committed, with events
// (in revision order) being the events after the previous publication. It
// never blocks on a watcher; the caller must not modify events afterwards.
func (h *Hub) Publish(rev int64, events []*storev1.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if rev > h.rev {
		h.rev = rev
	}
	if len(events) == 0 {
		return
	}
	for w := range h.watchers {
		evs := w.filter(events)
		if len(evs) == 0 {
			continue
		}
		select {
		case w.live <- evs:
		default:
			h.metrics.slow.Inc()
			h.opts.Logger.Warn("cancelling slow watcher", "key", string(w.key), "queued", len(w.live))
			h.cancelLocked(w, ReasonTooSlow)
		}
	}
}

// Watch registers a watcher for req. It fails with *mvcc.CompactedError when
// req.start_revision is below the compacted revision, with an
// mvcc.ErrInvalidArgument error for a malformed request, and with ErrClosed
// after Close. The caller must call Run (which unregisters on return) or
// Close on the watcher.
func (h *Hub) Watch(req *storev1.WatchCreateRequest) (*Watcher, error) {
	if err := mvcc.ValidateWatch(req); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	hist := h.src.OpenHistory() // holds every event <= h.rev
	start := req.GetStartRevision()
	if start == 0 {
		start = h.rev + 1
	}
	if start < hist.CompactRev() {
		err := &mvcc.CompactedError{CompactRev: hist.CompactRev(), Requested: start}
		hist.Close()
		return nil, err
	}
	w := &Watcher{
		h:              h,
		key:            req.GetKey(),
		end:            req.GetRangeEnd(),
		prevKV:         req.GetPrevKv(),
		progressNotify: req.GetProgressNotify(),
		start:          start,
		histTo:         h.rev,
		live:           make(chan []*storev1.Event, h.opts.BufferSize),
		progressReq:    make(chan struct{}, 1),
		canceled:       make(chan struct{}),
	}
	if start <= h.rev {
		w.hist = hist
	} else {
		hist.Close()
		w.caughtUp = true
	}
	h.watchers[w] = struct{}{}
	h.metrics.watchers.Inc()
	return w, nil
}

// Reset cancels every watcher with reason and sets the published revision
// to rev; used when the state was replaced by a snapshot.
func (h *Hub) Reset(rev int64, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.watchers {
		h.cancelLocked(w, reason)
	}
	h.rev = rev
}

// Close cancels every watcher and refuses new ones. Safe to call twice.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for w := range h.watchers {
		h.cancelLocked(w, ReasonShutdown)
	}
}

// cancelLocked ends w with reason and unregisters it. h.mu must be held.
func (h *Hub) cancelLocked(w *Watcher, reason string) {
	if _, ok := h.watchers[w]; !ok {
		return
	}
	delete(h.watchers, w)
	h.metrics.watchers.Dec()
	w.reason = reason
	close(w.canceled)
}

// unregister removes w without a reason (the client went away).
func (h *Hub) unregister(w *Watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.watchers[w]; ok {
		delete(h.watchers, w)
		h.metrics.watchers.Dec()
	}
}

// progressRev reports the revision up to which w has been sent every event,
// if w has caught up and its queue is empty. h.mu orders this against
// Publish.
func (h *Hub) progressRev(w *Watcher) (int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !w.caughtUp || len(w.live) > 0 {
		return 0, false
	}
	return h.rev, true
}

func (h *Hub) setCaughtUp(w *Watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	w.caughtUp = true
}

func (h *Hub) String() string { return fmt.Sprintf("watch.Hub{rev: %d}", h.Rev()) }

// Count returns the number of registered watchers.
func (h *Hub) Count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.watchers)
}
