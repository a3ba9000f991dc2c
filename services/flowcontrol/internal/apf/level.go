package apf

import (
	"context"
	"sync"
	"time"
)

// Queuing configures the queues of a limited priority level. A level
// without Queuing rejects a request at once when its seats are taken.
type Queuing struct {
	// Queues is the number of queues.
	Queues int
	// HandSize is the number of queues each flow is dealt by shuffle
	// sharding; its requests go to the least loaded of them.
	HandSize int
	// QueueLengthLimit is the number of requests a queue holds; more are
	// rejected.
	QueueLengthLimit int
}

// PriorityLevel is the configuration of one priority level.
type PriorityLevel struct {
	Name string
	// UID is the object's metadata.uid, sent to clients in
	// X-Kubernetes-PF-PriorityLevel-UID.
	UID string
	// Exempt levels never queue and hold nothing.
	Exempt bool
	// Seats is the concurrency limit of a limited level.
	Seats int
	// Queuing is nil for a level that rejects instead of queuing.
	Queuing *Queuing
}

// request states.
const (
	stateQueued = iota
	stateDispatched
	stateRemoved
)

// request is one Acquire waiting in, or dispatched from, a level.
type request struct {
	schema   string
	flow     uint64 // flowHash of its schema and distinguisher
	width    int
	queue    *queue // nil for a level without queues
	enqueued time.Time
	// ready is closed when the request is dispatched, or rejected while
	// queued (its state then stateRemoved, reason set).
	ready  chan struct{}
	state  int    // guarded by level.mu
	reason string // why a queued request was rejected; guarded by level.mu
}

// queue is a FIFO of requests of the flows dealt to it.
type queue struct {
	reqs         []*request
	seatsWaiting int
	seatsInUse   int
	// virtualFinish is the virtual time at which the last request
	// dispatched from this queue finishes, in seats.
	virtualFinish int64
}

// level is the run-time state of a priority level: its seats and queues.
//
// # Fair queuing
//
// Dispatch follows start-time fair queuing with cost = seats: the level
// keeps a virtual time V; a queue's head would start at max(V, the queue's
// virtualFinish) and finish width seats later, and the non-empty queue
// whose head finishes first is dispatched next (ties in round-robin
// order). V then moves to that head's start. A queue that was idle starts
// at V, without credit for its idleness, so a flow with a long backlog
// cannot starve a newcomer: the newcomer's head finishes before the
// backlog's next request. Fairness is in seats dispatched; unlike
// Kubernetes, actual execution time is not fed back.
//
// A head that needs more seats than are free blocks dispatch until enough
// are released (no smaller request overtakes it, so wide requests are not
// starved).
//
// A level is reconfigured in place (reconfigure) when its object changes;
// cfg.Name, cfg.UID, cfg.Exempt and uid never change, cfg's other fields
// and dealer are guarded by mu.
type level struct {
	cfg     PriorityLevel
	uid     string
	dealer  dealer
	metrics *metrics

	mu struct {
		sync.Mutex
		seatsInUse  int
		waiting     int // queued requests in all queues
		virtualTime int64
		next        int // queue where the next tie-breaking scan starts
		queues      []*queue
	}
}

func newLevel(cfg PriorityLevel, m *metrics) (*level, error) {
	l := &level{cfg: cfg, uid: cfg.UID, metrics: m}
	if l.uid == "" {
		l.uid = ObjectUID("prioritylevelconfigurations", cfg.Name)
	}
	if q := cfg.Queuing; q != nil {
		d, err := newDealer(q.Queues, q.HandSize)
		if err != nil {
			return nil, err
		}
		l.dealer = d
		l.mu.queues = newQueues(q.Queues)
	}
	if !cfg.Exempt {
		m.nominalLimit.WithLabelValues(cfg.Name).Set(float64(cfg.Seats))
	}
	return l, nil
}

func newQueues(n int) []*queue {
	qs := make([]*queue, n)
	for i := range qs {
		qs[i] = &queue{}
	}
	return qs
}

// reconfigure applies a new configuration of the same level (same name,
// UID and exemptness): its seats and queue length limit change at once;
// when its queues or hand size change, the waiting requests are dealt
// again into new queues in their order; when it stops queuing, they are
// rejected (concurrency-limit). Executing requests keep their seats.
func (l *level) reconfigure(cfg PriorityLevel) error {
	var d dealer
	if q := cfg.Queuing; q != nil {
		var err error
		if d, err = newDealer(q.Queues, q.HandSize); err != nil {
			return err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.cfg.Queuing
	l.cfg.Seats, l.cfg.Queuing = cfg.Seats, cfg.Queuing
	if !l.cfg.Exempt {
		l.metrics.nominalLimit.WithLabelValues(l.cfg.Name).Set(float64(cfg.Seats))
	}
	if old != nil && cfg.Queuing != nil && old.Queues == cfg.Queuing.Queues && old.HandSize == cfg.Queuing.HandSize {
		l.dispatchLocked()
		return nil
	}
	var waiting []*request
	for _, q := range l.mu.queues {
		waiting = append(waiting, q.reqs...)
	}
	l.dealer, l.mu.queues, l.mu.waiting, l.mu.next = d, nil, 0, 0
	if cfg.Queuing != nil {
		l.mu.queues = newQueues(cfg.Queuing.Queues)
	}
	for _, r := range waiting {
		if cfg.Queuing == nil {
			r.state, r.reason = stateRemoved, ReasonConcurrencyLimit
			l.metrics.inQueue.WithLabelValues(l.cfg.Name, r.schema).Dec()
			close(r.ready)
			continue
		}
		q := l.chooseQueueLocked(r.flow)
		r.queue = q
		q.reqs = append(q.reqs, r)
		q.seatsWaiting += r.width
		l.mu.waiting++
	}
	l.dispatchLocked()
	return nil
}

// width clamps a request's width to [1, Seats]. l.mu is held.
func (l *level) width(w uint32) int {
	if w == 0 {
		w = 1
	}
	if int64(w) > int64(l.cfg.Seats) {
		return l.cfg.Seats
	}
	return int(w)
}

// acquire waits until the request of flow (schema, distinguisher) is
// dispatched, for at most maxWait. It returns the dispatched request, which
// the caller passes to release, and how long it waited. It fails with a
// *RejectedError, ctx's error, or ErrClosed when closed is closed.
func (l *level) acquire(ctx context.Context, closed <-chan struct{}, schema, distinguisher string, width uint32, maxWait time.Duration) (*request, time.Duration, error) {
	start := time.Now()
	r := &request{schema: schema, flow: flowHash(schema, distinguisher), enqueued: start, ready: make(chan struct{})}

	l.mu.Lock()
	r.width = l.width(width)
	if l.cfg.Seats == 0 {
		// Nothing could ever dispatch it.
		l.mu.Unlock()
		return nil, 0, l.reject(schema, ReasonConcurrencyLimit)
	}
	if l.cfg.Queuing == nil {
		if l.mu.seatsInUse+r.width > l.cfg.Seats {
			l.mu.Unlock()
			return nil, 0, l.reject(schema, ReasonConcurrencyLimit)
		}
		l.startLocked(r)
		l.mu.Unlock()
		l.metrics.observeWait(l.cfg.Name, schema, true, 0)
		return r, 0, nil
	}
	q := l.chooseQueueLocked(r.flow)
	if len(q.reqs) >= l.cfg.Queuing.QueueLengthLimit {
		l.mu.Unlock()
		return nil, 0, l.reject(schema, ReasonQueueFull)
	}
	r.queue = q
	q.reqs = append(q.reqs, r)
	q.seatsWaiting += r.width
	l.mu.waiting++
	l.metrics.inQueue.WithLabelValues(l.cfg.Name, schema).Inc()
	l.dispatchLocked()
	dispatched := r.state == stateDispatched
	l.mu.Unlock()
	if dispatched {
		wait := time.Since(start)
		l.metrics.observeWait(l.cfg.Name, schema, true, wait)
		return r, wait, nil
	}

	timer := time.NewTimer(maxWait)
	defer timer.Stop()
	var cause error
	select {
	case <-r.ready:
		l.mu.Lock()
		state, reason := r.state, r.reason
		l.mu.Unlock()
		if state != stateDispatched {
			// Rejected while queued: its level stopped queuing.
			l.metrics.observeWait(l.cfg.Name, schema, false, time.Since(start))
			return nil, 0, l.reject(schema, reason)
		}
		wait := time.Since(start)
		l.metrics.observeWait(l.cfg.Name, schema, true, wait)
		return r, wait, nil
	case <-ctx.Done():
		cause = ctx.Err()
	case <-closed:
		cause = ErrClosed
	case <-timer.C:
		cause = l.reject(schema, ReasonTimeout)
	}

	l.mu.Lock()
	if r.state == stateRemoved {
		// Rejected while queued, at the same moment.
		l.mu.Unlock()
		l.metrics.observeWait(l.cfg.Name, schema, false, time.Since(start))
		return nil, 0, cause
	}
	if r.state == stateDispatched {
		l.mu.Unlock()
		wait := time.Since(start)
		l.metrics.observeWait(l.cfg.Name, schema, true, wait)
		if _, timedOut := cause.(*RejectedError); timedOut {
			return r, wait, nil // dispatched just in time: use it
		}
		l.release(r, 0) // nobody will use it
		return nil, 0, cause
	}
	l.removeLocked(r)
	// The removed request may have been the head blocking dispatch.
	l.dispatchLocked()
	l.mu.Unlock()
	if _, ok := cause.(*RejectedError); !ok {
		l.metrics.rejected.WithLabelValues(l.cfg.Name, schema, ReasonCancelled).Inc()
	}
	l.metrics.observeWait(l.cfg.Name, schema, false, time.Since(start))
	return nil, 0, cause
}

func (l *level) reject(schema, reason string) *RejectedError {
	l.metrics.rejected.WithLabelValues(l.cfg.Name, schema, reason).Inc()
	return &RejectedError{PriorityLevel: l.cfg.Name, FlowSchema: schema, Reason: reason}
}

// release returns r's seats and dispatches waiting requests. executed is
// how long the request ran; 0 when it never did.
func (l *level) release(r *request, executed time.Duration) {
	l.mu.Lock()
	if r.state != stateDispatched {
		l.mu.Unlock()
		return
	}
	r.state = stateRemoved
	l.mu.seatsInUse -= r.width
	if r.queue != nil {
		r.queue.seatsInUse -= r.width
	}
	l.dispatchLocked()
	l.mu.Unlock()
	l.metrics.executingSeats.WithLabelValues(l.cfg.Name, r.schema).Sub(float64(r.width))
	if executed > 0 {
		l.metrics.execution.WithLabelValues(l.cfg.Name, r.schema).Observe(executed.Seconds())
	}
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

// dispatchLocked dispatches queued requests while seats allow.
func (l *level) dispatchLocked() {
	for l.mu.waiting > 0 {
		qi, start := l.selectQueueLocked()
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
		q.seatsInUse += r.width
		q.virtualFinish = start + int64(r.width)
		l.mu.virtualTime = start
		l.mu.waiting--
		l.mu.next = (qi + 1) % len(l.mu.queues)
		l.metrics.inQueue.WithLabelValues(l.cfg.Name, r.schema).Dec()
		l.startLocked(r)
	}
}

// startLocked marks r dispatched and takes its seats.
func (l *level) startLocked(r *request) {
	l.mu.seatsInUse += r.width
	r.state = stateDispatched
	close(r.ready)
	l.metrics.executingSeats.WithLabelValues(l.cfg.Name, r.schema).Add(float64(r.width))
	l.metrics.dispatched.WithLabelValues(l.cfg.Name, r.schema).Inc()
}

// selectQueueLocked returns the non-empty queue whose head finishes first
// in virtual time, and the head's virtual start. l.mu.waiting must be > 0.
func (l *level) selectQueueLocked() (int, int64) {
	n := len(l.mu.queues)
	best, bestStart, bestFinish := -1, int64(0), int64(0)
	for k := 0; k < n; k++ {
		i := (l.mu.next + k) % n
		q := l.mu.queues[i]
		if len(q.reqs) == 0 {
			continue
		}
		start := max(l.mu.virtualTime, q.virtualFinish)
		finish := start + int64(q.reqs[0].width)
		if best < 0 || finish < bestFinish {
			best, bestStart, bestFinish = i, start, finish
		}
	}
	return best, bestStart
}

// removeLocked takes a queued request out of its queue.
func (l *level) removeLocked(r *request) {
	q := r.queue
	for i, x := range q.reqs {
		if x == r {
			q.reqs = append(q.reqs[:i], q.reqs[i+1:]...)
			break
		}
	}
	q.seatsWaiting -= r.width
	l.mu.waiting--
	r.state = stateRemoved
	l.metrics.inQueue.WithLabelValues(l.cfg.Name, r.schema).Dec()
}

// seatsInUse returns the seats held, for tests and status.
func (l *level) seatsInUse() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.seatsInUse
}

// queued returns the number of queued requests.
func (l *level) queued() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mu.waiting
}
