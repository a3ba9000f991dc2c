// Package watchpark lets a watch served over HTTP/2 go on without a
// goroutine of its own while it is idle: a parked watch.
//
// The front end gives a watch whose response can outlive its handler (an
// HTTP/2 stream of h2conn) a Handoff in its request's context. When the
// watch has nothing to send, the code relaying it parks it (Park): it
// arranges to be woken by the watch's next message, its failure or the end
// of its context, and returns, and so does every frame of the handler
// down to the front end's. The functions those frames would have run on
// return (Defer) wait for the watch's end instead. Once the handler's
// goroutine has returned (Returned), each wake-up resumes the watch on a
// goroutine of a Runner's (shared by the watches of a front end), which
// writes what came straight into the HTTP/2 stream and parks again, or
// ends the watch (End): the deferred functions run in the order they were
// deferred, then the response ends.
//
// Invariant: at most one goroutine serves a watch at a time. A resumption
// starts only after the handler's goroutine has returned, and the code
// that parks does nothing more with the watch once Park has succeeded (the
// wake-up may come before Park returns).
package watchpark

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
)

// ErrParked is what a watch's handler returns when the watch was parked:
// it goes on after the handler returned, and its end is reported by End.
var ErrParked = errors.New("watchpark: the watch goes on parked")

// Handoff is one watch's hand-over from its handler to wake-ups. Its
// methods are safe on a nil *Handoff: a watch without one never parks,
// and Defer runs at once.
type Handoff struct {
	rn *Runner // nil: each resumption on a new goroutine

	mu sync.Mutex
	// parked: the watch went on past its handler's return (or is about
	// to: Park is arranging its wake-up); set for good once returned.
	parked bool
	// returned: the handler's goroutine has returned; a wake-up resumes
	// the watch from then on. pending is a resumption asked for before.
	returned bool
	pending  func()
	// resume is what a wake-up runs; wakeFn the wake-up, made once.
	resume func()
	wakeFn func()
	// deferred are the functions to run at the watch's end, in order,
	// in deferredBuf while they fit; finish ends the response after them.
	deferred    []func()
	deferredBuf [deferredInline]func()
	finish      func(abort bool)
	ended       bool
	err         error
}

// deferredInline is how many deferred functions a Handoff holds without
// an allocation of their own: as many as the front end defers for a
// parked watch.
const deferredInline = 6

// New returns a Handoff whose resumptions run on rn's goroutines; with a
// nil rn, each on a new goroutine, a panic logged to slog.Default.
func New(rn *Runner) *Handoff {
	h := &Handoff{}
	h.Init(rn)
	return h
}

// Init readies a zero Handoff that is part of a larger record, as New
// does. It is called before the Handoff is used, once.
func (h *Handoff) Init(rn *Runner) {
	h.rn = rn
	h.deferred = h.deferredBuf[:0]
}

type key struct{}

// With returns ctx carrying h.
func With(ctx context.Context, h *Handoff) context.Context {
	return context.WithValue(ctx, key{}, h)
}

// From returns the Handoff ctx carries, or nil.
func From(ctx context.Context) *Handoff {
	h, _ := ctx.Value(key{}).(*Handoff)
	return h
}

// Parker is where a parked watch leaves its wake-up: Park arranges for
// wake to be called, once, when the watch has something to do, and
// reports false, keeping no wake-up, when it has something now. wake must
// not block. (watchmux's streams, through watchfanoutclient.)
type Parker interface {
	Park(wake func()) bool
}

// Park parks the watch on p: the wake-up resumes it with resume, on a
// goroutine of the Runner's (once the handler has returned). Park reports
// whether the watch is parked; when it is, the caller returns at once
// (ErrParked) and touches the watch no more. With a nil h, Park is false.
func (h *Handoff) Park(p Parker, resume func()) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	h.parked = true
	h.resume = resume
	if h.wakeFn == nil {
		h.wakeFn = h.wake
	}
	wake := h.wakeFn
	h.mu.Unlock()
	if p.Park(wake) {
		return true
	}
	h.mu.Lock()
	if !h.returned {
		h.parked = false
	}
	h.mu.Unlock()
	return false
}

// wake resumes the watch: now, on a goroutine of the Runner's, or once
// the handler has returned.
func (h *Handoff) wake() {
	h.mu.Lock()
	resume := h.resume
	if !h.returned {
		h.pending = resume
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	h.rn.start(h, resume)
}

// run runs a resumption; a panic in it is logged and ends the watch, its
// stream reset.
func (h *Handoff) run(resume func()) {
	defer func() {
		if p := recover(); p != nil {
			h.rn.logger().Error("panic serving a parked watch", "panic", p, "stack", string(debug.Stack()))
			h.end(fmt.Errorf("watchpark: panic: %v", p), true)
		}
	}()
	resume()
}

// Parked reports whether the watch is parked: its handler returns (or
// has returned) before its end.
func (h *Handoff) Parked() bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.parked
}

// Defer runs f now, unless the watch is parked: then at the watch's end,
// after the functions deferred before it. Handler frames defer their
// end-of-request work with it (defer h.Defer(f)).
func (h *Handoff) Defer(f func()) {
	if h == nil {
		f()
		return
	}
	h.mu.Lock()
	if !h.parked {
		h.mu.Unlock()
		f()
		return
	}
	h.deferred = append(h.deferred, f)
	h.mu.Unlock()
}

// Returned is called last by the handler's goroutine as it returns. For a
// parked watch, finish is what ends its response after the deferred
// functions (abort: reset the stream rather than end it), and a wake-up
// that came already resumes the watch now.
func (h *Handoff) Returned(finish func(abort bool)) {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.returned = true
	h.finish = finish
	resume := h.pending
	h.pending = nil
	h.mu.Unlock()
	if resume != nil {
		h.rn.start(h, resume)
	}
}

// End ends a parked watch, on the goroutine that resumed it, with err
// (what its handler would have returned): the deferred functions run, in
// order, then the response ends.
func (h *Handoff) End(err error) { h.end(err, false) }

func (h *Handoff) end(err error, abort bool) {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	h.ended, h.err = true, err
	deferred, finish := h.deferred, h.finish
	h.deferred, h.finish = nil, nil
	h.mu.Unlock()
	if finish != nil {
		// Even when a deferred function panics: the stream must end.
		defer finish(abort)
	}
	for _, f := range deferred {
		f()
	}
}

// Err is the error the watch ended with (End's), for the deferred
// functions.
func (h *Handoff) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}
