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
// would, with queued nil. Otherwise it returns the queued request, which
// cancel takes out of its queue, and done
// is called once with what acquire would have returned: by the goroutine
// that dispatches the request (a release, a reconfiguration, a
// borrowing adjustment) or takes it out of its queue (the level's
// deadline timer, ctx's end, cancel, closeQueued), after that goroutine
// released l.mu. done
// should not block: other requests' wake-ups wait behind it.
func (l *level) acquireFunc(ctx context.Context, closed <-chan struct{}, schema, distinguisher string, d *Digest, maxWait time.Duration,
	done func(*request, time.Duration, error)) (dispatched *request, wait time.Duration, err error, queued *request) {
	start := time.Now()
	r := &request{schema: schema, distinguisher: distinguisher, digest: d, flow: flowHash(schema, distinguisher), enqueued: start}
	l.mu.Lock()
	// Checked under mu: closeQueued, after closed is closed, takes every
	// level's mu and empties its queues of these requests, so none
	// queued here is left waiting after Close.
	select {
	case <-closed:
		l.mu.Unlock()
		return nil, 0, ErrClosed, nil
	default:
	}
	if rej := l.enqueueLocked(r, d.Width, l.now()); rej != nil {
		l.unlock()
		return nil, 0, rej, nil
	}
	if r.state == stateDispatched {
		l.unlock()
		wait = time.Since(start)
		l.flowMetrics(schema).observeWait(true, wait)
		return r, wait, nil, nil
	}
	// Still queued, and no other goroutine can see r before l.mu is
	// released: its ways out of the queue are set up first. Its MaxWait
	// is watched by the level's one timer (expireLocked), not one of its
	// own; its context only when that can end.
	r.deadline = start.Add(maxWait)
	l.watchDeadlineLocked(r.deadline)
	stopCtx := func() bool { return false }
	if ctx.Done() != nil {
		stopCtx = context.AfterFunc(ctx, func() { l.leave(r, ctx.Err) })
	}
	r.wake = func(why error) {
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
	return nil, 0, nil, r
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

// watchDeadlineLocked makes the level's deadline timer fire by
// deadline, the MaxWait of a request acquireFunc queued. l.mu is held.
func (l *level) watchDeadlineLocked(deadline time.Time) {
	switch {
	case l.mu.deadlineTimer == nil:
		l.mu.deadlineTimer = time.AfterFunc(time.Until(deadline), l.expire)
	case l.mu.deadlineAt.IsZero() || deadline.Before(l.mu.deadlineAt):
		l.mu.deadlineTimer.Reset(time.Until(deadline))
	default:
		return // it fires earlier, and then looks again
	}
	l.mu.deadlineAt = deadline
}

// expire is the level's deadline timer: it rejects (time-out) the
// requests queued by acquireFunc whose MaxWait has passed, and sets the
// timer again for the earliest deadline left. One timer per level
// instead of one per queued request: under load it fires about once a
// MaxWait and scans the queues once, where a timer per request cost a
// timer start and stop for every queued Acquire.
func (l *level) expire() {
	l.mu.Lock()
	now := time.Now()
	var next time.Time
	var late []*request
	for _, q := range l.mu.queues {
		for _, r := range q.reqs {
			switch {
			case r.wake == nil: // a blocking acquire has its own timer
			case !r.deadline.After(now):
				late = append(late, r)
			case next.IsZero() || r.deadline.Before(next):
				next = r.deadline
			}
		}
	}
	l.mu.deadlineAt = next
	if !next.IsZero() {
		l.mu.deadlineTimer.Reset(next.Sub(now))
	}
	if len(late) > 0 {
		vnow := l.now()
		l.syncDemandLocked(vnow)
		for _, r := range late {
			l.removeLocked(r)
			l.signalLocked(r, l.reject(r.schema, ReasonTimeout))
		}
		// A removed request may have been a head blocking dispatch.
		l.dispatchLocked(vnow)
	}
	l.unlock()
}

// cancel takes r, queued by acquireFunc, out of its queue, if it is
// still queued: its done gets context.Canceled.
func (l *level) cancel(r *request) {
	l.leave(r, func() error { return context.Canceled })
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
