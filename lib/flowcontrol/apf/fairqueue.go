package apf

import "time"

// Fair queuing in seat-seconds, as Kubernetes' queueset (KEP-1040)
// with its virtual time self-clocked (start-time fair queuing, SFQ).
//
// Each queue keeps nextR, the virtual time at which its next request
// would start: increased by width × the level's estimate when a request
// is dispatched, and corrected at release by what it was charged less
// width × its real execution time, so a queue pays for the seat-seconds
// its requests really used. The next request dispatched is the head of
// the non-empty queue whose head would finish first (nextR + width ×
// estimate; of equal ones, the least loaded queue's, then the head
// queued first), when enough seats are free: a head waiting for seats
// blocks smaller ones behind it, so wide requests are not starved.
//
// The level's virtual time R is the largest nextR a request was
// dispatched at. A queue that was idle starts, when it gets a request,
// at R or at the earliest nextR of a queue with a request waiting, if
// that is earlier: no credit for its idleness, and no later than the
// heads of backlogged queues; as it is the least loaded of the queues
// tied with it, its request takes the next free seat, and of several
// such requests the one queued first does. A flow gets that
// only while its queue has nothing else queued or running: once its
// request runs, its nextR moves on by the request's charge, as any
// queue's. kube-apiserver instead
// advances R in real time at min(seats requested, seats) / busy queues;
// that rate counts every busy queue as served an equal share, but a
// flow that holds one seat for a short request while its queue is busy
// (a mouse) takes more than that share meanwhile, so the backlogged
// queues (an elephant's) get less, their nextR falls behind R without
// bound, and every request of a mouse waits behind all their heads.
//
// The estimate is the level's moving average of its requests' real
// execution times (estimator), not a fixed guess: with a fixed estimate
// far above the real times (kube-apiserver once charged 3 s), a queue's
// nextR jumps ahead while its request runs and falls back at release,
// and the order of heads follows those swings rather than the service
// each flow received.
//
// As kube-apiserver's anti-windup (boundNextDispatch), a queue's nextR
// is never below the R at which its head arrived.
//
// Fairness is accounted per queue, as kube-apiserver's: a flow's request
// that arrives while its queue is busy joins the least loaded queue of
// its hand, and if that one is idle starts at R. A mouse's request that
// arrives while its previous one runs thus still takes the next free
// seat beside an elephant; with one virtual time per flow across its
// hand it would wait its turn against the elephant's.

// EstimatedServiceTime is what a level charges a dispatched request
// until it has seen one finish; from then on it charges the moving
// average of its requests' execution times (estimator).
const EstimatedServiceTime = 3 * time.Second

// estimateWeight is the weight of each new execution time in a level's
// moving average: about the last 16 requests count.
const estimateWeight = 1.0 / 16

// estimator is a level's estimate of a request's execution time per
// seat, in seconds: EstimatedServiceTime until the first observation,
// then an exponentially weighted moving average of the real times.
type estimator struct {
	seconds  float64
	observed bool
}

// get returns the current estimate in seconds.
func (e *estimator) get() float64 {
	if !e.observed {
		return EstimatedServiceTime.Seconds()
	}
	return e.seconds
}

// observe adds one real execution time; the first one replaces the
// initial guess.
func (e *estimator) observe(executed time.Duration) {
	x := max(executed.Seconds(), 0)
	if !e.observed {
		e.seconds, e.observed = x, true
		return
	}
	e.seconds += estimateWeight * (x - e.seconds)
}

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

// syncDemandLocked integrates the level's seat demand (borrow.go) up to
// now. Every change of the seats requested is preceded by it.
func (l *level) syncDemandLocked(now time.Time) {
	requested := float64(l.mu.seatsInUse + l.mu.seatsWaiting)
	l.mu.demand.max = max(l.mu.demand.max, requested)
	elapsed := now.Sub(l.mu.syncedAt).Seconds()
	if elapsed <= 0 {
		return
	}
	l.mu.syncedAt = now
	l.mu.demand.add(requested, elapsed)
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

// pushLocked appends r to q; an idle queue starts at R, or at the
// earliest head's nextR if that is earlier (fairqueue.go).
func (l *level) pushLocked(q *queue, r *request) {
	busy := q.busy()
	r.arrivalR = l.mu.vt
	if !busy {
		q.nextR = l.mu.vt
		for _, o := range l.mu.queues {
			if len(o.reqs) > 0 && o.nextR < q.nextR {
				q.nextR = o.nextR
			}
		}
		r.arrivalR = q.nextR
	}
	r.queue = q
	if r.seq == 0 { // dealt again by a reconfiguration, it keeps its place
		l.mu.seq++
		r.seq = l.mu.seq
	}
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
	boundLocked(q)
	l.activeLocked(q, busy)
	l.flowMetrics(r.schema).inQueue.Dec()
}

// correctLocked charges q the real execution time of r instead of what
// it was charged at dispatch.
func (l *level) correctLocked(q *queue, r *request, executed time.Duration) {
	q.nextR -= r.charged - float64(r.width)*executed.Seconds()
	boundLocked(q)
}

// boundLocked raises q's nextR to the R at which its head arrived
// (anti-windup, above).
func boundLocked(q *queue) {
	if len(q.reqs) > 0 && q.nextR < q.reqs[0].arrivalR {
		q.nextR = q.reqs[0].arrivalR
	}
}

// dispatchLocked dispatches queued requests while seats allow, at now.
// It stops without looking for the next head while no seat is free (a
// request takes at least one): so a request queued behind busy seats
// costs no scan of the queues.
func (l *level) dispatchLocked(now time.Time) {
	est := l.mu.estimate.get()
	for l.mu.waiting > 0 && l.mu.seatsInUse < l.cfg.Seats {
		qi := l.selectQueueLocked(est)
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
		l.mu.vt = max(l.mu.vt, q.nextR)
		r.charged = float64(r.width) * est
		q.nextR += r.charged
		boundLocked(q)
		l.mu.waiting--
		r.dispatched = now
		l.flowMetrics(r.schema).inQueue.Dec()
		l.startLocked(r)
	}
}

// selectQueueLocked returns the non-empty queue whose head would finish
// first in virtual time, at est seconds per seat; of equal ones, the
// least loaded (seats waiting and in use), then the one whose head was
// queued first: heads tie when their flows were idle and started at the
// same R (pushLocked), and first come, first served keeps each of them
// from waiting for those queued after it, as an order by queue index
// would. l.mu.waiting must be > 0. The scan stops once it
// has seen l.mu.waiting requests (the count of all queues' requests):
// the queues left are empty.
func (l *level) selectQueueLocked(est float64) int {
	best, bestFinish, bestLoad, bestSeq := -1, 0.0, 0, uint64(0)
	left := l.mu.waiting
	for i := 0; i < len(l.mu.queues) && left > 0; i++ {
		q := l.mu.queues[i]
		if len(q.reqs) == 0 {
			continue
		}
		left -= len(q.reqs)
		finish, load := q.nextR+float64(q.reqs[0].width)*est, q.seatsWaiting+q.seatsInUse
		seq := q.reqs[0].seq
		if best < 0 || finish < bestFinish || (finish == bestFinish && (load < bestLoad || load == bestLoad && seq < bestSeq)) {
			best, bestFinish, bestLoad, bestSeq = i, finish, load, seq
		}
	}
	return best
}
