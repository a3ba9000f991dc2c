// Package ctxhook runs a function when a request's context ends, through a
// hook the context offers itself where its server supports that
// (h2conn's streams), instead of a context registered under it.
//
// context.AfterFunc registers a child with the context: the child's own
// record and, for the context's first child, a children map. A
// long-lived request that waits for its context's end (an idle watch)
// keeps both for as long as it lasts. A context that can run one function
// at its end does without either.
package ctxhook

import "context"

// Key is the context key under which a request's context that offers a
// hook answers with itself, a Hooker.
type Key struct{}

// Hooker is a request's context that runs one function at its end.
type Hooker interface {
	// Done is the context's Done.
	Done() <-chan struct{}
	// Hook has f run once, on a goroutine of its own,
	// when the context ends, and reports true. It reports false and
	// does nothing when the context holds a hook already or has ended.
	Hook(f func()) bool
	// Unhook removes the hook Hook set, and reports whether it did:
	// false once the hook has run or is running.
	Unhook() bool
}

// Stop ends an AfterFunc's registration.
type Stop struct {
	h    Hooker
	stop func() bool
}

// Stop stops f from being run, as context.AfterFunc's stop does: it
// reports true when it did, false when f has run or is running (or Stop
// had stopped it already).
func (s Stop) Stop() bool {
	if s.h != nil {
		return s.h.Unhook()
	}
	return s.stop()
}

// AfterFunc arranges for f to run once ctx ends, as context.AfterFunc
// does. When ctx's cancellation is its request context's own (no context
// with a cancellation of its own lies between them) and that context
// offers a free hook (Key), the hook runs f; else context.AfterFunc does.
func AfterFunc(ctx context.Context, f func()) Stop {
	// Done is the same channel only when every context between ctx and
	// the Hooker passes its Done through (value contexts): a context
	// that ends on its own (context.WithCancel, WithDeadline) would end
	// without the Hooker.
	if h, ok := ctx.Value(Key{}).(Hooker); ok && h.Done() == ctx.Done() && h.Hook(f) {
		return Stop{h: h}
	}
	return Stop{stop: context.AfterFunc(ctx, f)}
}
