// Package reqdeadline lets a handler give its request's own context a
// deadline once it knows it, where the server that made the context
// supports that (h2conn): the request's context then ends at the
// deadline, with no context of the handler's own above it.
//
// A handler that learns its deadline only from the request (a watch's
// timeoutSeconds) would otherwise wrap the request's context in a
// context.WithTimeout of its own: a second cancel context, done channel
// and children map per request, which a long-lived request (an idle
// watch) keeps for as long as it lasts.
package reqdeadline

import (
	"context"
	"time"
)

// Key is the context key under which a request's context that supports
// a deadline answers with itself, a Setter.
type Key struct{}

// Setter is a request's context whose deadline can be set after it was
// made. SetDeadline gives it deadline d and reports true, or reports
// false and changes nothing when it has a deadline already (its own or
// its parent's). Once set, the context ends at d as a
// context.WithDeadline's does: Done closes, Err is
// context.DeadlineExceeded and context.Cause too; contexts derived from
// it by context.WithCancel see context.Canceled with that cause.
type Setter interface {
	SetDeadline(d time.Time) bool
}

// Set gives the request's context under ctx deadline d (Setter), and
// reports whether it did. When it did not (no context of ctx's chain
// supports it, or it has a deadline already), the caller bounds its work
// by a context.WithDeadline of its own.
func Set(ctx context.Context, d time.Time) bool {
	s, ok := ctx.Value(Key{}).(Setter)
	return ok && s.SetDeadline(d)
}
