package h2conn

import (
	"context"
	"sync"
	"time"

	"github.com/meridian-cp/meridian/lib/ctxhook"
	"github.com/meridian-cp/meridian/services/apigateway/internal/reqdeadline"
)

// streamCtx is a stream's request context: a cancel context under the
// connection's, ended by the stream's end (stop), and, once its handler
// set one (reqdeadline.Set), by its deadline, from a timer of its own.
// A watch's timeoutSeconds is carried so, without a context of the
// watch's own for as long as the watch lasts.
//
// It runs one function at its end (ctxhook.Hooker), from stop or its
// deadline's timer: a parked watch's wake-up at its context's end
// (watchmux) without a context registered under this one. Every end
// passes there: the stream's, the deadline's, and the connection's
// (conn.shut stops every stream's context before it cancels theirs).
type streamCtx struct {
	context.Context // the cancel context; Done and the cause are its
	cancel          context.CancelCauseFunc

	// mu guards deadline, timer, hook and ended: SetDeadline and Hook
	// run on the handler's goroutine, stop on whichever ends the
	// stream, expire on the timer's.
	mu       sync.Mutex
	deadline time.Time // zero: none
	timer    *time.Timer
	// hook runs once, at the end. ended is set by stop before it
	// cancels, and by runHook after expire does: after it no hook is
	// taken and no deadline's timer started.
	hook  func()
	ended bool
}

var (
	_ reqdeadline.Setter = (*streamCtx)(nil)
	_ ctxhook.Hooker     = (*streamCtx)(nil)
)

// newStreamCtx returns a stream's context under parent.
func newStreamCtx(parent context.Context) *streamCtx {
	ctx, cancel := context.WithCancelCause(parent)
	return &streamCtx{Context: ctx, cancel: cancel}
}

// SetDeadline gives the context deadline d (reqdeadline.Setter): at d it
// ends with cause context.DeadlineExceeded. It reports false when the
// context has a deadline already.
func (c *streamCtx) SetDeadline(d time.Time) bool {
	if _, ok := c.Context.Deadline(); ok {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.deadline.IsZero() {
		return false
	}
	c.deadline = d
	if !c.ended {
		// Stopped at the stream's end (stop): a timer left running
		// would keep the context until d.
		c.timer = time.AfterFunc(time.Until(d), c.expire)
	}
	return true
}

// expire ends the context at its deadline.
func (c *streamCtx) expire() {
	c.cancel(context.DeadlineExceeded)
	c.runHook()
}

// Hook has f run once at the context's end (ctxhook.Hooker).
func (c *streamCtx) Hook(f func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hook != nil || c.ended || c.Context.Err() != nil {
		return false
	}
	c.hook = f
	return true
}

// Unhook removes the hook Hook set (ctxhook.Hooker).
func (c *streamCtx) Unhook() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ok := c.hook != nil
	c.hook = nil
	return ok
}

// runHook starts the hook once the context has ended; the context's own
// cancel has run, so the hook sees it ended. The hook runs on a goroutine
// of its own, as context.AfterFunc's functions do: stop runs on the
// connection's serve goroutine, which a hook that waits (a watchmux
// stream telling watchfanout over gRPC) must not hold up.
func (c *streamCtx) runHook() {
	c.mu.Lock()
	f := c.hook
	c.hook, c.ended = nil, true
	c.mu.Unlock()
	if f != nil {
		go f()
	}
}

// Deadline is the deadline SetDeadline set, else the parent's.
func (c *streamCtx) Deadline() (time.Time, bool) {
	c.mu.Lock()
	d := c.deadline
	c.mu.Unlock()
	if !d.IsZero() {
		return d, true
	}
	return c.Context.Deadline()
}

// Err is context.DeadlineExceeded once the context ended at its deadline,
// as a context.WithDeadline's is; else the cancel context's error.
func (c *streamCtx) Err() error {
	err := c.Context.Err()
	if err != nil && context.Cause(c.Context) == context.DeadlineExceeded {
		return context.DeadlineExceeded
	}
	return err
}

// Value answers reqdeadline.Key and ctxhook.Key with the context itself; other keys are
// the cancel context's (context.Cause and the context package find the
// cancel context through it, so contexts derived from this one register
// with it directly, without a goroutine).
func (c *streamCtx) Value(key any) any {
	switch key.(type) {
	case reqdeadline.Key, ctxhook.Key:
		return c
	}
	return c.Context.Value(key)
}

// stop ends the context with cause err at the stream's end, and its
// deadline's timer.
func (c *streamCtx) stop(err error) {
	c.mu.Lock()
	c.ended = true
	t := c.timer
	c.timer = nil
	c.mu.Unlock()
	if t != nil {
		t.Stop()
	}
	c.cancel(err)
	c.runHook()
}
