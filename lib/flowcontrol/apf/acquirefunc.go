package apf

import (
	"context"
	"time"
)

// Requests that wait without a goroutine: acquireFunc queues a request
// whose outcome goes to a callback (request.wake) instead of a blocked
// caller. Whoever changes a queued request's state under level.mu
// (dispatchLocked, reconfigure, leave, closeQueued) links it on
// level.mu.woken (signalLocked); unlock releases mu and then calls the
// linked requests' wake functions, in the order they were linked. So a
// wake function never runs under a level's mu and may take any lock,
// this level's included; and each request is woken exactly once, since
// only a queued request is signalled and signalling takes it out of the
// queued state.

// signalLocked tells r's waiter that r was dispatched (why nil) or left
// its queue (why): at once for a blocking acquire (r.ready), at the next
// unlock for acquireFunc's (r.wake). l.mu is held.
func (l *level) signalLocked(r *request, why error) {
	if r.wake == nil {
		if r.ready != nil {
			close(r.ready)
		}
		return
	}
	r.woken = why
	if l.mu.wokenTail == nil {
		l.mu.woken = r
	} else {
		l.mu.wokenTail.nextWoken = r
	}
	l.mu.wokenTail = r
}

// unlock releases l.mu and then wakes the requests signalled meanwhile.
func (l *level) unlock() {
	r := l.mu.woken
	l.mu.woken, l.mu.wokenTail = nil, nil
	l.mu.Unlock()
	for r != nil {
		next := r.nextWoken
		r.nextWoken = nil
		r.wake(r.woken)
		r = next
	}
}

// acquireFunc is acquire for a caller that does not block. When the
// request is dispatched or rejected at once, it returns what acquire
// would, with queued false. Otherwise it returns queued true, and done
// is called once with what acquire would have returned: by the goroutine
// that dispatches the request (a release, a reconfiguration, a
// borrowing adjustment) or takes it out of its queue (its maxWait timer,
// ctx's end, closeQueued), after that goroutine released l.mu. done
// should not block: other requests' wake-ups wait behind it.
func (l *level) acquireFunc(ctx context.Context, closed <-chan struct{}, schema, distinguisher string, d *Digest, maxWait time.Duration,
	done func(*request, time.Duration, error)) (dispatched *request, wait time.Duration, err error, queued bool) {
	start := time.Now()
	r := &request{schema: schema, distinguisher: distinguisher, digest: d, flow: flowHash(schema, distinguisher), enqueued: start}
	l.mu.Lock()
	// Checked under mu: closeQueued, after closed is closed, takes every
	// level's mu and empties its queues of these requests, so none
	// queued here is left waiting after Close.
	select {
	case <-closed:
		l.mu.Unlock()
		return nil, 0, ErrClosed, false
	default:
	}
	if rej := l.enqueueLocked(r, d.Width, l.now()); rej != nil {
		l.unlock()
		return nil, 0, rej, false
	}
	if r.state == stateDispatched {
		l.unlock()
		wait = time.Since(start)
		l.flowMetrics(schema).observeWait(true, wait)
		return r, wait, nil, false
	}
	// Still queued, and no other goroutine can see r before l.mu is
	// released: its ways out of the queue are set up first.
	timer := time.AfterFunc(maxWait, func() { l.leave(r, func() error { return l.reject(schema, ReasonTimeout) }) })
	stopCtx := context.AfterFunc(ctx, func() { l.leave(r, ctx.Err) })
	r.wake = func(why error) {
		timer.Stop()
		stopCtx()
		wait := time.Since(start)
		l.flowMetrics(schema).observeWait(why == nil, wait)
		if why != nil {
			l.countCancelled(schema, why)
			done(nil, 0, why)
			return
		}
		done(r, wait, nil)
	}
	l.unlock()
	return nil, 0, nil, true
}

// leave takes r out of its queue, if it is still queued, and wakes it
// with why(), which is called only then.
func (l *level) leave(r *request, why func() error) {
	l.mu.Lock()
	if r.state != stateQueued {
		l.mu.Unlock()
		return
	}
	now := l.now()
	l.syncDemandLocked(now)
	l.removeLocked(r)
	l.signalLocked(r, why())
	// The removed request may have been the head blocking dispatch.
	l.dispatchLocked(now)
	l.unlock()
}

// closeQueued takes the requests queued by acquireFunc out of l's queues
// and wakes them with ErrClosed: the Controller closed. (A blocking
// acquire sees the closed channel itself.)
func (l *level) closeQueued() {
	l.mu.Lock()
	var gone []*request
	for _, q := range l.mu.queues {
		for _, r := range q.reqs {
			if r.wake != nil {
				gone = append(gone, r)
			}
		}
	}
	now := l.now()
	l.syncDemandLocked(now)
	for _, r := range gone {
		l.removeLocked(r)
		l.signalLocked(r, ErrClosed)
	}
	l.unlock()
}
