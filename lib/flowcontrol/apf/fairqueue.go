package apf

import "time"

// Fair queuing, as Kubernetes' queueset (KEP-1040), in seat-seconds.
//
// A level keeps a virtual time R that advances, while any of its live
// queues is busy, at min(seats requested, seats) / busy queues per real
// second: the service each busy queue would get if the seats were shared
// equally. Each queue keeps nextR, the R at which its next request would
// start: set to R when an idle queue gets a request (no credit for its
// idleness), increased by width × EstimatedServiceTime when a request is
// dispatched, and corrected at release by width × (estimate − real
// execution time), so a queue pays for the seat-seconds its requests
// really used. The next request dispatched is the head of the non-empty
// queue whose head would finish first (nextR + width × estimate; ties in
// round-robin order), when enough seats are free: a head waiting for
// seats blocks smaller ones behind it, so wide requests are not starved.

// EstimatedServiceTime is what a dispatched request is charged until its
// real execution time is known (kube-apiserver's estimate).
const EstimatedServiceTime = 3 * time.Second

var estimate = EstimatedServiceTime.Seconds()

// queue is a FIFO of requests of the flows dealt to it.
type queue struct {
	reqs         []*request
	seatsWaiting int
	seatsInUse   int
	// nextR is the virtual time at which its next request starts.
	nextR float64
	// live is false once a reconfiguration replaced the queue: its
	// executing requests release their seats without it.
	live bool
}

func newQueues(n int, vt float64) []*queue {
	qs := make([]*queue, n)
	for i := range qs {
		qs[i] = &queue{nextR: vt, live: true}
	}
	return qs
}

// busy reports whether q has queued or executing requests.
func (q *queue) busy() bool { return len(q.reqs) > 0 || q.seatsInUse > 0 }

// activeLocked updates the count of busy queues after a change of q,
// which was busy before it or not.
func (l *level) activeLocked(q *queue, wasBusy bool) {
	switch now := q.busy(); {
	case now && !wasBusy:
		l.mu.active++
	case !now && wasBusy:
		l.mu.active--
	}
}

// syncTimeLocked advances virtual time to now. Every change of the busy
// queues or of the seats requested is preceded by it.
//
// It also integrates the level's seat demand (borrow.go) over the same
// interval.
func (l *level) syncTimeLocked(now time.Time) {
	requested := float64(l.mu.seatsInUse + l.mu.seatsWaiting)
	l.mu.demand.max = max(l.mu.demand.max, requested)
	elapsed := now.Sub(l.mu.syncedAt).Seconds()
	if elapsed <= 0 {
		return
	}
	l.mu.syncedAt = now
	l.mu.demand.add(requested, elapsed)
	if l.mu.active == 0 {
		return
	}
	l.mu.vt += elapsed * min(requested, float64(l.cfg.Seats)) / float64(l.mu.active)
}

// chooseQueueLocked deals the flow's hand and picks the queue in it with
// the fewest seats waiting and executing.
func (l *level) chooseQueueLocked(hash uint64) *queue {
	var best *queue
	bestLoad := 0
	l.dealer.deal(hash, func(card int) {
		q := l.mu.queues[card]
		if load := q.seatsWaiting + q.seatsInUse; best == nil || load < bestLoad {
			best, bestLoad = q, load
		}
	})
	return best
}

// pushLocked appends r to q; an idle queue starts at the current virtual
// time.
func (l *level) pushLocked(q *queue, r *request) {
	busy := q.busy()
	if !busy {
		q.nextR = l.mu.vt
	}
	r.queue = q
	q.reqs = append(q.reqs, r)
	q.seatsWaiting += r.width
	l.mu.seatsWaiting += r.width
	l.mu.waiting++
	l.activeLocked(q, busy)
}

// removeLocked takes a queued request out of its queue.
func (l *level) removeLocked(r *request) {
	q := r.queue
	busy := q.busy()
	for i, x := range q.reqs {
		if x == r {
			q.reqs = append(q.reqs[:i], q.reqs[i+1:]...)
			break
		}
	}
	q.seatsWaiting -= r.width
	l.mu.seatsWaiting -= r.width
	l.mu.waiting--
	r.state = stateRemoved
	l.activeLocked(q, busy)
	l.metrics.inQueue.WithLabelValues(l.cfg.Name, r.schema).Dec()
}

// correctLocked charges q the real execution time of r instead of the
// estimate it was charged at dispatch.
func (l *level) correctLocked(q *queue, r *request, executed time.Duration) {
	q.nextR -= float64(r.width) * (estimate - executed.Seconds())
}

// dispatchLocked dispatches queued requests while seats allow, at now.
func (l *level) dispatchLocked(now time.Time) {
	for l.mu.waiting > 0 {
		qi := l.selectQueueLocked()
		q := l.mu.queues[qi]
		r := q.reqs[0]
		if l.mu.seatsInUse+r.width > l.cfg.Seats {
			return
		}
		q.reqs[0] = nil
		q.reqs = q.reqs[1:]
		if len(q.reqs) == 0 {
			q.reqs = nil // let the backing array go
		}
		q.seatsWaiting -= r.width
		l.mu.seatsWaiting -= r.width
		q.seatsInUse += r.width
		q.nextR += float64(r.width) * estimate
		l.mu.waiting--
		l.mu.next = (qi + 1) % len(l.mu.queues)
		r.dispatched = now
		l.metrics.inQueue.WithLabelValues(l.cfg.Name, r.schema).Dec()
		l.startLocked(r)
	}
}

// selectQueueLocked returns the non-empty queue whose head would finish
// first in virtual time. l.mu.waiting must be > 0.
func (l *level) selectQueueLocked() int {
	n := len(l.mu.queues)
	best, bestFinish := -1, 0.0
	for k := 0; k < n; k++ {
		i := (l.mu.next + k) % n
		q := l.mu.queues[i]
		if len(q.reqs) == 0 {
			continue
		}
		if finish := q.nextR + float64(q.reqs[0].width)*estimate; best < 0 || finish < bestFinish {
			best, bestFinish = i, finish
		}
	}
	return best
}
