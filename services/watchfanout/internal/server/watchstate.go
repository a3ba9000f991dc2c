package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/selection"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/batchcodec"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Reasons a watch stops other than its subscription ending.
const (
	stopTimeout = 1 + iota // timeoutSeconds (or the default) elapsed
	stopGone               // the client cancelled it or went away
)

// watch is one watch of a mux.
//
// Invariant: at most one goroutine runs a watch's code at a time — its
// setup goroutine (start, then initial and replay), later the mux's sender
// (drain) — and only that goroutine touches the fields below sched. sched
// is true while that goroutine is at work or the watch waits on the mux's
// ready list; whoever flips it from false to true (poke) schedules the
// watch. After finish, sched stays true, so nothing runs it again.
//
// A relist storm holds thousands of watches at once, so what a watch
// keeps is trimmed: its request only until start has read it, no timer
// of its own (the server's deadlines end it), a channel to wait for
// credit only while its setup waits for one, and the channel finish
// closes only for a Watch stream, whose handler waits on it.
type watch struct {
	m    *mux
	id   int64
	req  *watchv1.WatchRequest // read by start, then dropped
	done chan struct{}         // Watch only (nil for WatchMany): closed by finish
	// shared: the client reads WatchManyResponse.also, so the sender may
	// send this watch's event batches in messages shared with other
	// watches of the stream (share.go).
	shared bool

	sched   atomic.Bool
	stopped atomic.Int32 // 0 or a stop reason
	// window is the client's credit window in messages (0: no credit
	// flow control); credit is what is left of it.
	window int64
	credit atomic.Int64
	// creditMu guards creditCh, which exists while the setup goroutine
	// waits for credit (capacity 1: credit was granted or the watch
	// stopped).
	creditMu sync.Mutex
	creditCh chan struct{}
	// deadline is when the watch times out; dl is its place in the
	// server's deadlines (-1 when not there), guarded by the deadlines'
	// lock.
	deadline time.Time
	dl       int

	// Owned by the running goroutine (see above).
	r        *cache.Resource
	f        cache.Format
	flt      *selection.Filter
	from     watchStart
	sub      *cache.Subscription
	b        batcher
	items    []cache.Item // taken from the watcher; items[next:] not sent yet
	next     int
	started  bool // the first (empty) message was sent
	setup    bool // the setup goroutine runs the watch (it may wait for credit)
	ending   bool // finish is sending the last messages (they never wait)
	slot     bool // holds an initial-events slot
	finished bool
}

// newWatch returns watch id of m; done, if not nil, is closed when the
// watch has finished.
func newWatch(m *mux, id int64, req *watchv1.WatchRequest, window int64, shared bool, done chan struct{}) *watch {
	w := &watch{m: m, id: id, req: req, done: done, shared: shared && m.many, window: window, setup: true, dl: -1}
	w.credit.Store(window)
	w.sched.Store(true) // the setup goroutine is at work
	max := m.s.cfg.MaxBatchBytes
	w.b = batcher{send: w, max: max, enc: batchcodec.NewBuilder(m.s.pool, m.many, id, max)}
	return w
}

// sendResponse sends the watch's first message (empty).
func (w *watch) sendResponse(resp *watchv1.WatchResponse) error {
	if err := w.takeCredit(); err != nil {
		return err
	}
	return w.m.send(w.id, resp, false, nil)
}

// sendFirst sends the first (empty) message, which tells the client the
// watch is established; from then on failures are ERROR frames.
func (w *watch) sendFirst() error {
	if err := w.sendResponse(&watchv1.WatchResponse{}); err != nil {
		return err
	}
	w.started = true
	return nil
}

// sendEncoded sends a batch of the watch.
func (w *watch) sendEncoded(msg *batchcodec.Message) error {
	if err := w.takeCredit(); err != nil {
		return err
	}
	return w.m.sendEncoded(msg)
}

// takeCredit takes the credit of one message. With a credit window each
// message takes one credit: the setup goroutine waits for credit (it is
// the watch's own); drain never sends without credit (it runs on the
// stream's sender, which must not wait for one watch); the last messages
// of finish go without (the window allows one over).
func (w *watch) takeCredit() error {
	if w.window > 0 {
		if w.setup && !w.ending {
			if err := w.awaitCredit(); err != nil {
				return err
			}
		}
		w.credit.Add(-1)
	}
	return nil
}

// errStopped: the watch was stopped while it waited for credit.
var errStopped = errors.New("watchfanout: watch stopped")

// awaitCredit waits until the watch has credit, is stopped, or its stream
// ends.
func (w *watch) awaitCredit() error {
	if w.credit.Load() > 0 {
		return nil
	}
	// The channel first, then the checks: a grant or stop after them
	// finds the channel and wakes us.
	w.creditMu.Lock()
	if w.creditCh == nil {
		w.creditCh = make(chan struct{}, 1)
	}
	ch := w.creditCh
	w.creditMu.Unlock()
	for w.credit.Load() <= 0 {
		if w.stopped.Load() != 0 {
			return errStopped
		}
		select {
		case <-ch:
		case <-w.m.ctx.Done():
			return w.m.ctx.Err()
		}
	}
	return nil
}

// dropCreditCh lets the channel go once the setup goroutine no longer
// waits for credit (drain never does).
func (w *watch) dropCreditCh() {
	w.creditMu.Lock()
	w.creditCh = nil
	w.creditMu.Unlock()
}

// grant adds n messages of credit.
func (w *watch) grant(n int64) {
	w.credit.Add(n)
	w.wakeCredit()
	w.poke()
}

func (w *watch) wakeCredit() {
	w.creditMu.Lock()
	if w.creditCh != nil {
		select {
		case w.creditCh <- struct{}{}:
		default:
		}
	}
	w.creditMu.Unlock()
}

// poke makes sure the watch will be looked at: the watcher's OnPending
// and stop call it. It never blocks (the cache's dispatcher calls it
// holding a lock).
func (w *watch) poke() {
	if w.sched.CompareAndSwap(false, true) {
		w.m.schedule(w)
	}
}

// stop asks the watch to end for reason.
func (w *watch) stop(reason int32) {
	w.stopped.CompareAndSwap(0, reason)
	w.wakeCredit()
	w.poke()
}

// start validates the request, sends the first message, waits for the
// cache where the resourceVersion asks for it, and registers the watcher;
// then initial events (holding a slot) and the replay follow.
func (w *watch) start() {
	s, req := w.m.s, w.req
	w.req = nil // the watch outlives its request by minutes
	r, err := s.resolve(w.m.ctx, req.GetResource())
	if err != nil {
		w.finish(err)
		return
	}
	f, err := formatOf(r, req.GetEncoding(), req.GetIncludeObject())
	if err != nil {
		w.finish(err)
		return
	}
	flt, err := filter(r, req.GetLabelSelector(), req.GetFieldSelector())
	if err != nil {
		w.finish(err)
		return
	}
	start, err := parseWatch(req)
	if err != nil {
		w.finish(err)
		return
	}
	timeout := s.cfg.WatchTimeout
	if t := req.GetTimeoutSeconds(); t > 0 {
		timeout = time.Duration(t) * time.Second
	}
	w.r, w.f, w.flt, w.from = r, f, flt, start
	w.deadline = time.Now().Add(timeout)
	// The first message tells the client the watch is established. A
	// watch of changes only, from the store's current revision (RV unset,
	// sendInitialEvents=false), starts at a revision read below: its first
	// message waits for that read (registerConsistent), or a write the
	// client makes once it has it could come before the start and be
	// missed (as kube-apiserver, which reads the revision before it
	// answers). The others start at a revision that covers whatever the
	// client wrote before asking, or send it as initial state.
	if start.rv >= 0 || start.initial {
		if err := w.sendFirst(); err != nil {
			w.finish(err)
			return
		}
	}

	opts := cache.WatchOptions{Namespace: req.GetNamespace(), Filter: flt, Bookmarks: req.GetAllowBookmarks(), OnPending: w.poke}
	if start.rv < 0 {
		// Unset: consistent. The wait goes on without this goroutine.
		w.awaitConsistent(opts)
		return
	}
	// The waits need a context; it lives only as long as the setup.
	ctx, cancel := context.WithDeadline(w.m.ctx, w.deadline)
	defer cancel()
	switch {
	case start.rv == 0:
		opts.Initial, opts.After = start.initial, -1
	case start.initial:
		// sendInitialEvents=true with RV N: state not older than N.
		if err := s.waitNotOlder(ctx, start.rv); err != nil {
			w.finishWait(ctx, err)
			return
		}
		opts.Initial = true
	default:
		opts.After = start.rv
	}
	w.register(opts, false)
}

// register registers the watcher, then sends the initial events (holding
// a slot) or the replay. Called by the setup goroutine (foreign false),
// or by another goroutine that must not block (foreign: the cache's, see
// awaitConsistent), which hands whatever may wait to a new goroutine.
func (w *watch) register(opts cache.WatchOptions, foreign bool) {
	s := w.m.s
	sub, err := w.r.Watch(opts)
	if err != nil {
		runOn(foreign, func() { w.finish(err) })
		return
	}
	w.sub = sub
	s.deadlines.add(w)
	if sub.Initial != nil {
		// Initial events hold one of InitialEventsConcurrency slots (this
		// bounds memory in a relist storm); without a free one the rest of
		// the setup is parked as a closure, not a blocked goroutine.
		if !s.initialSlots.acquire(w.initial) {
			return
		}
		runOn(foreign, w.initial)
		return
	}
	runOn(foreign, w.replay)
}

// runOn runs f on the caller's goroutine, or on a new one when the caller
// is foreign (a goroutine that must not block; see register).
func runOn(foreign bool, f func()) {
	if foreign {
		go f()
		return
	}
	f()
}

// awaitConsistent waits for the store's current revision (read
// linearizably) and for the cache to reach it, then registers the watch:
// with initial events at the cache's revision then, else right after the
// revision read — not after whatever the cache holds once the wait is
// over, which would lose the writes that landed during the wait.
//
// No goroutine waits: the cache calls back once its shared read is done
// (ConsistentRevFunc), a timer ends the wait after ReadWaitTimeout (or at
// the watch's own deadline) and the stream's end ends it too; the first
// of the three to claim the wait goes on with the watch. In a relist
// storm thousands of watches wait here at once, and a goroutine each
// would hold its stack while it waits and leave a goroutine descriptor
// that the runtime never frees.
func (w *watch) awaitConsistent(opts cache.WatchOptions) {
	s := w.m.s
	limit := time.Now().Add(s.cfg.ReadWaitTimeout)
	if w.deadline.Before(limit) {
		limit = w.deadline
	}
	c := &consistentWait{}
	c.mu.Lock()
	c.timer = time.AfterFunc(time.Until(limit), func() {
		if c.claim() {
			// As waitConsistent's timeout: 504, or a quiet end when it
			// was the watch's own deadline.
			if !time.Now().Before(w.deadline) {
				w.stopped.CompareAndSwap(0, stopTimeout)
			}
			go w.finish(apierrors.NewTimeoutError("could not read the store's current revision in time", 1))
		}
	})
	c.unhook = context.AfterFunc(w.m.ctx, func() {
		if c.claim() {
			w.stopped.CompareAndSwap(0, stopGone)
			go w.finish(w.m.ctx.Err())
		}
	})
	c.mu.Unlock()
	s.cfg.Cache.ConsistentRevFunc(func(rev int64, err error) {
		if !c.claim() {
			return
		}
		switch {
		case err != nil:
			go w.finish(apierrors.NewServiceUnavailable(fmt.Sprintf("could not read the store's current revision: %v", err)))
			return
		case s.cfg.Cache.Rev() < rev:
			// The cache is behind the store: wait for it as any read does,
			// on a goroutine (rare: it follows the store within
			// milliseconds).
			go func() {
				ctx, cancel := context.WithDeadline(w.m.ctx, limit)
				defer cancel()
				if err := s.cfg.Cache.WaitForRev(ctx, rev); err != nil {
					if w.m.ctx.Err() != nil {
						w.stopped.CompareAndSwap(0, stopGone)
					} else if !time.Now().Before(w.deadline) {
						w.stopped.CompareAndSwap(0, stopTimeout)
					}
					w.finish(tooLargeResourceVersion(rev, s.cfg.Cache.Rev()))
					return
				}
				w.registerConsistent(opts, rev, false)
			}()
			return
		}
		w.registerConsistent(opts, rev, true)
	})
}

// registerConsistent registers a consistent watch once the cache has
// reached rev.
func (w *watch) registerConsistent(opts cache.WatchOptions, rev int64, foreign bool) {
	opts.Initial, opts.After = w.from.initial, -1
	if w.from.initial {
		w.register(opts, foreign)
		return
	}
	// Changes only: the first message goes now that the start is known
	// (see start). Sending may wait for credit, which the cache's
	// goroutine must not.
	opts.After = rev
	runOn(foreign, func() {
		if err := w.sendFirst(); err != nil {
			w.finish(err)
			return
		}
		w.register(opts, false)
	})
}

// consistentWait is one watch's wait in awaitConsistent: whoever claims
// it first (the cache's callback, the timer, the stream's end) goes on
// with the watch and stops the other two.
type consistentWait struct {
	mu     sync.Mutex
	done   bool
	timer  *time.Timer
	unhook func() bool
}

func (c *consistentWait) claim() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done {
		return false
	}
	c.done = true
	c.timer.Stop()
	c.unhook()
	return true
}

// initial sends the snapshot as ADDED events (and the end bookmark),
// gives its slot back and goes on with the replay.
func (w *watch) initial() {
	w.slot = true
	if err := w.sendInitial(); err != nil || w.stopped.Load() != 0 {
		w.finish(err)
		return
	}
	w.slot = false
	w.m.s.initialSlots.release()
	w.replay()
}

func (w *watch) sendInitial() error {
	sub := w.sub
	var err error
	ascend := sub.Initial.Ascend
	if name, ok := w.flt.Name(); ok {
		ascend = func(from string, fn func(*cache.Event) bool) { sub.Initial.AscendNamed(from, name, fn) }
	}
	ascend("", func(ev *cache.Event) bool {
		if !ev.Matches(w.flt) {
			return true
		}
		if err = w.b.event(ev, cache.FrameAdded, w.f); err == nil {
			sub.Sent(ev)
		}
		return err == nil && w.stopped.Load() == 0
	})
	if err != nil || w.stopped.Load() != 0 {
		return err
	}
	if w.from.endBookmark {
		ev, err := sub.Resource().Bookmark(sub.Rev, true)
		if err != nil {
			return err
		}
		if err := w.b.event(ev, cache.FrameBookmark, w.f); err != nil {
			return err
		}
	}
	// The snapshot pins the tree as it was at sub.Rev (a clone shares
	// nodes until they change): let it go now, not when the watch ends.
	sub.Initial = nil
	return w.b.flush()
}

// replay sends the history events the watch starts with; then the watch
// is live and its setup goroutine ends.
func (w *watch) replay() {
	sub := w.sub
	for _, ev := range sub.Replay {
		if kind, ok := sub.Kind(ev); ok {
			if err := w.b.event(ev, kind, w.f); err != nil {
				w.finish(err)
				return
			}
			sub.Sent(ev)
		}
	}
	sub.Replay = nil
	if err := w.b.flush(); err != nil {
		w.finish(err)
		return
	}
	w.setup = false
	w.dropCreditCh()
	w.idle()
}

// idle gives up sched; if work arrived meanwhile (a poke that found sched
// set scheduled nothing), it schedules the watch itself.
//
// Invariant (enforced here): once sched is false another goroutine may
// run the watch — a poke schedules it and the mux's sender drains it,
// writing items and next — so idle reads the fields the running
// goroutine owns before it gives sched up, and after that only what is
// safe to share: the atomics, the immutable window and the subscription
// (its Pending takes the watcher's lock).
func (w *watch) idle() {
	taken, sub := w.next < len(w.items), w.sub
	w.sched.Store(false)
	if w.stopped.Load() != 0 || w.hasWork(taken, sub) {
		w.poke()
	}
}

// hasWork reports whether drain has something to send now: taken items
// not sent yet (taken, read by the owner) or queued ones (sub). Out of
// credit it has not: the grant pokes.
func (w *watch) hasWork(taken bool, sub *cache.Subscription) bool {
	if w.window > 0 && w.credit.Load() <= 0 {
		return false
	}
	return taken || sub.Pending()
}

// drain sends what the watcher queued, one message per credit, then goes
// idle. Run by the mux's sender, so it never waits: out of credit, the
// items it took stay in items until a grant.
func (w *watch) drain() {
	for {
		if w.stopped.Load() != 0 {
			w.finish(nil)
			return
		}
		if w.window > 0 && w.credit.Load() <= 0 {
			w.idle()
			return
		}
		if w.next == len(w.items) {
			items, err := w.sub.TryNext(w.items[:0])
			if err != nil {
				w.finish(err)
				return
			}
			w.items, w.next = items, 0
			if len(items) == 0 {
				w.idle()
				return
			}
		}
		if err := w.sendMessage(); err != nil {
			w.finish(err)
			return
		}
	}
}

// sendMessage sends one message of the taken items: as many as fit in a
// batch. The same message also goes to the other ready watches whose next
// items are the same (share.go).
func (w *watch) sendMessage() error {
	var p pending
	start := w.next
	for w.next < len(w.items) {
		it := w.items[w.next]
		if err := p.prepare(it.Ev, it.Kind, w.f); err != nil {
			return err
		}
		if !w.b.fits(p.n) {
			break
		}
		if err := w.b.put(&p, it.Ev.Rev); err != nil {
			return err
		}
		w.next++
	}
	if w.shared {
		w.b.also = w.m.shareBatch(w, w.items[start:w.next])
	}
	clear(w.items[start:w.next])
	return w.b.flush()
}

// finishWait is finish for an error of a wait bounded by ctx.
func (w *watch) finishWait(ctx context.Context, err error) {
	switch {
	case w.m.ctx.Err() != nil:
		w.stopped.CompareAndSwap(0, stopGone)
	case ctx.Err() != nil:
		// The watch's own timeout ran out while it waited: it ends like
		// any timed-out watch, quietly.
		w.stopped.CompareAndSwap(0, stopTimeout)
	}
	w.finish(err)
}

// finish ends the watch with err (nil: it ended by itself or was
// stopped): the ERROR frame or the buffered frames, then the end message.
func (w *watch) finish(err error) {
	if w.finished {
		return
	}
	w.finished, w.ending = true, true
	if w.slot {
		w.slot = false
		w.m.s.initialSlots.release()
	}
	w.m.s.deadlines.remove(w)
	if w.sub != nil {
		w.sub.Close()
		w.sub.Initial, w.sub.Replay = nil, nil
	}
	endErr := w.last(err)
	// The end is sent even to a cancelled watch, so that the client knows
	// no more of its messages follow; when the stream is gone it fails,
	// which is fine.
	_ = w.m.send(w.id, nil, true, endErr)
	w.b.release()
	w.dropCreditCh()
	if w.done != nil {
		close(w.done)
	}
	w.m.ended(w)
}

// last sends what a watch that ended with err still owes its client, and
// returns the error the watch ends with (nil: OK).
func (w *watch) last(err error) error {
	if !w.started {
		if err == nil {
			return nil
		}
		return toGRPC(err)
	}
	switch reason := w.stopped.Load(); {
	case reason == stopGone || w.m.ctx.Err() != nil:
		return nil
	case reason == stopTimeout, err == nil, errors.Is(err, cache.ErrClosed), errors.Is(err, cache.ErrGone):
		// Timeout, shutdown, or a CRD changed: the stream ends; the
		// client re-watches.
		return w.b.flush()
	}
	st := watchError(err)
	frame, ferr := w.r.ErrorFrame(w.f, &st)
	if ferr != nil {
		return ferr
	}
	if err := w.b.add(frame, 0); err != nil {
		return err
	}
	return w.b.flush()
}
