// Package watchinit carries in a watch's context what to do once the
// watch has sent its initial events: the REST front end gives the
// watch's flow-control seats back then, as kube-apiserver's flow control
// does (a watch occupies seats only while it sends the state it starts
// with; its long life after that is not concurrency).
package watchinit

import (
	"context"
	"sync/atomic"
)

type key struct{}

// once calls f the first time call is called; a watch's context keeps it
// for the watch's life, so it is as small as it can be.
type once struct {
	called atomic.Bool
	f      func()
}

func (o *once) call() {
	if o.called.CompareAndSwap(false, true) {
		o.f()
	}
}

// With returns ctx carrying done, which Sent calls at most once.
func With(ctx context.Context, done func()) context.Context {
	return context.WithValue(ctx, key{}, &once{f: done})
}

// Sent reports that the watch of ctx has sent its initial events (or,
// for a watch without any, has started): it calls the func of With, the
// first time only; without one it does nothing.
func Sent(ctx context.Context) {
	if o, ok := ctx.Value(key{}).(*once); ok {
		o.call()
	}
}
