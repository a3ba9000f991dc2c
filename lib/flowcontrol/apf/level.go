package apf

import (
	"context"
	"sync"
	"sync/atomic"
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
	// Seats is the concurrency limit of a limited level: at first, and
	// until borrowing adjusts it (borrow.go), its nominal limit less
	// half of what it may lend.
	Seats int
	// Nominal is its nominal concurrency limit; MinSeats and MaxSeats
	// bound what borrowing makes of it (nominal − lendable, nominal +
	// borrowing limit). Zero MaxSeats means Seats, fixed.
	Nominal, MinSeats, MaxSeats int
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
	schema        string
	distinguisher string
	digest        *Digest // for the dumps; nil in tests
	flow          uint64  // flowHash of its schema and distinguisher
	width         int
	queue         *queue // nil for a level without queues
	enqueued      time.Time
	// seq orders the requests queued in a level: dispatch breaks ties
	// by it, first come first served (selectQueueLocked).
	seq uint64
	// deadline is when a request queued by acquireFunc is rejected
	// (time-out) if still queued: enqueued + MaxWait (level.expire).
	deadline   time.Time
	dispatched time.Time // when it took its seats
	// adopted: dispatched by a previous leader (adopt.go); its run time
	// here is a part of its real one, so it feeds no estimate.
	adopted bool
	// arrivalR is the level's virtual time when it was queued; charged
	// the seat-seconds its queue was charged at dispatch (fairqueue.go).
	arrivalR, charged float64
	// ready is closed when the request is dispatched, or rejected while
	// queued (its state then stateRemoved, reason set); nil for a request
	// queued by acquireFunc, which has wake instead.
	ready  chan struct{}
	state  int    // guarded by level.mu
	reason string // why a queued request was rejected; guarded by level.mu
	// wake, for a request queued by acquireFunc, is called once, by the
	// goroutine that dispatched it or took it out of its queue, after
	// that goroutine released level.mu (level.unlock): with nil when it
	// was dispatched, else with why it left its queue (woken).
	wake func(why error)
	// woken is that error, and nextWoken links the requests to wake at
	// the next unlock (level.mu.woken); both guarded by level.mu.
	woken     error
	nextWoken *request
}

// level is the run-time state of a priority level: its seats and queues,
// dispatched by fair queuing (fairqueue.go).
//
// A level is reconfigured in place (reconfigure) when its object changes;
// cfg.Name, cfg.UID, cfg.Exempt and uid never change, cfg's other fields
// and dealer are guarded by mu.
//
// Invariants, under mu: 0 <= seatsInUse <= cfg.Seats (after a
// reconfiguration that lowered Seats, seatsInUse may exceed it until
// enough are released; nothing is dispatched meanwhile); seatsInUse is
// the sum of the widths of the dispatched, unreleased requests; waiting
// and seatsWaiting are the count and the widths of the queued ones;
// active is the number of live queues with a queued or executing request.
type level struct {
	cfg     PriorityLevel
	uid     string
	dealer  dealer
	metrics *metrics
	// flows caches the metrics of each flow schema seen, by name
	// (*flowMetrics).
	flows sync.Map
	// now is the clock of virtual time and execution times (tests set it).
	now func() time.Time
	// counts of outcomes since the level was made, for the dumps.
	dispatched, rejected, timedOut, cancelled atomic.Uint64

	mu struct {
		sync.Mutex
		seatsInUse   int
		waiting      int // queued requests in all queues
		seatsWaiting int // their widths
		active       int // live queues with queued or executing requests
		// vt is the level's virtual time R, in seat-seconds
		// (fairqueue.go); syncedAt is when demand was last integrated.
		vt float64
		// estimate is what a dispatched request is charged per seat.
		estimate estimator
		syncedAt time.Time
		// seq is the last request.seq given.
		seq    uint64
		queues []*queue
		// executing are the dispatched, unreleased requests.
		executing map[*request]struct{}
		// demand integrates seatsInUse + seatsWaiting since the last
		// borrowing adjustment; smoothed is its smoothed envelope.
		demand   integrator
		smoothed float64
		// woken lists, through request.nextWoken, the requests queued
		// by acquireFunc that were dispatched or left their queues while
		// mu was held; unlock wakes them once mu is released.
		woken, wokenTail *request
		// deadlineTimer rejects the requests queued by acquireFunc that
		// wait past their deadline (expire); deadlineAt is when it fires,
		// zero when it is not set. Made at the first such request.
		deadlineTimer *time.Timer
		deadlineAt    time.Time
	}
}

func newLevel(cfg PriorityLevel, m *metrics) (*level, error) {
	l := &level{cfg: cfg, uid: cfg.UID, metrics: m, now: time.Now}
	if l.uid == "" {
		l.uid = ObjectUID("prioritylevelconfigurations", cfg.Name)
	}
	l.mu.syncedAt = l.now()
	l.mu.executing = map[*request]struct{}{}
	if q := cfg.Queuing; q != nil {
		d, err := newDealer(q.Queues, q.HandSize)
		if err != nil {
			return nil, err
		}
		l.dealer = d
		l.mu.queues = newQueues(q.Queues, 0)
	}
	l.setLimitGaugesLocked()
	return l, nil
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
	defer l.unlock()
	now := l.now()
	l.syncDemandLocked(now)
	old := l.cfg.Queuing
	seats := cfg.Seats
	if cfg.MaxSeats > 0 && l.cfg.MaxSeats > 0 {
		// Borrowing goes on from the current limit, within the new bounds.
		seats = min(max(l.cfg.Seats, cfg.MinSeats), cfg.MaxSeats)
	}
	l.cfg.Seats, l.cfg.Queuing = seats, cfg.Queuing
	l.cfg.Nominal, l.cfg.MinSeats, l.cfg.MaxSeats = cfg.Nominal, cfg.MinSeats, cfg.MaxSeats
	l.setLimitGaugesLocked()
	if old != nil && cfg.Queuing != nil && old.Queues == cfg.Queuing.Queues && old.HandSize == cfg.Queuing.HandSize {
		l.dispatchLocked(now)
		return nil
	}
	var waiting []*request
	for _, q := range l.mu.queues {
		q.live = false // its executing requests release without it
		waiting = append(waiting, q.reqs...)
	}
	l.dealer, l.mu.queues = d, nil
	l.mu.waiting, l.mu.seatsWaiting, l.mu.active = 0, 0, 0
	if cfg.Queuing != nil {
		l.mu.queues = newQueues(cfg.Queuing.Queues, l.mu.vt)
	}
	for _, r := range waiting {
		if cfg.Queuing == nil {
			r.state, r.reason = stateRemoved, ReasonConcurrencyLimit
			l.flowMetrics(r.schema).inQueue.Dec()
			var why error
			if r.wake != nil {
				// A blocking acquire counts its rejection itself.
				why = l.reject(r.schema, ReasonConcurrencyLimit)
			}
			l.signalLocked(r, why)
			continue
		}
		l.pushLocked(l.chooseQueueLocked(r.flow), r)
	}
	l.dispatchLocked(now)
	return nil
}

// width clamps a request's width to [1, Seats] (1 while Seats is 0).
// l.mu is held.
func (l *level) width(w uint32) int {
	if w == 0 {
		w = 1
	}
	if int64(w) > int64(l.cfg.Seats) {
		return max(l.cfg.Seats, 1)
	}
	return int(w)
}

// enqueueLocked admits r: at once into free seats of a level without
// queues, or into its flow's queue and then dispatched if its turn has
// come. It returns the rejection of a request that cannot be admitted.
func (l *level) enqueueLocked(r *request, width uint32, now time.Time) *RejectedError {
	r.width = l.width(width)
	l.syncDemandLocked(now)
	switch {
	case l.cfg.Seats == 0 && l.cfg.MaxSeats == 0:
		return l.reject(r.schema, ReasonConcurrencyLimit) // nothing could ever dispatch it
	case l.cfg.Queuing == nil:
		if l.mu.seatsInUse+r.width > l.cfg.Seats {
			return l.reject(r.schema, ReasonConcurrencyLimit)
		}
		r.dispatched = now
		l.startLocked(r)
		return nil
	}
	q := l.chooseQueueLocked(r.flow)
	if len(q.reqs) >= l.cfg.Queuing.QueueLengthLimit {
		return l.reject(r.schema, ReasonQueueFull)
	}
	l.pushLocked(q, r)
	l.flowMetrics(r.schema).inQueue.Inc()
	l.dispatchLocked(now)
	return nil
}

// acquire waits until the request of flow (schema, distinguisher) is
// dispatched, for at most maxWait. It returns the dispatched request, which
// the caller passes to release, and how long it waited. It fails with a
// *RejectedError, ctx's error, or ErrClosed when closed is closed.
func (l *level) acquire(ctx context.Context, closed <-chan struct{}, schema, distinguisher string, d *Digest, maxWait time.Duration) (*request, time.Duration, error) {
	start := time.Now()
	l.mu.Lock()
	r := &request{schema: schema, distinguisher: distinguisher, digest: d, flow: flowHash(schema, distinguisher), enqueued: start, ready: make(chan struct{})}
	if rej := l.enqueueLocked(r, d.Width, l.now()); rej != nil {
		l.unlock()
		return nil, 0, rej
	}
	dispatched := r.state == stateDispatched
	l.unlock()
	if dispatched {
		wait := time.Since(start)
		l.flowMetrics(schema).observeWait(true, wait)
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
			l.flowMetrics(schema).observeWait(false, time.Since(start))
			return nil, 0, l.reject(schema, reason)
		}
		wait := time.Since(start)
		l.flowMetrics(schema).observeWait(true, wait)
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
		l.flowMetrics(schema).observeWait(false, time.Since(start))
		return nil, 0, cause
	}
	if r.state == stateDispatched {
		l.mu.Unlock()
		wait := time.Since(start)
		l.flowMetrics(schema).observeWait(true, wait)
		if _, timedOut := cause.(*RejectedError); timedOut {
			return r, wait, nil // dispatched just in time: use it
		}
		l.release(r, false) // nobody will use it
		return nil, 0, cause
	}
	now := l.now()
	l.syncDemandLocked(now)
	l.removeLocked(r)
	// The removed request may have been the head blocking dispatch.
	l.dispatchLocked(now)
	l.unlock()
	l.countCancelled(schema, cause)
	l.flowMetrics(schema).observeWait(false, time.Since(start))
	return nil, 0, cause
}

// countCancelled counts a request of schema that left its queue for
// cause, unless cause is a rejection (counted by reject).
func (l *level) countCancelled(schema string, cause error) {
	if _, ok := cause.(*RejectedError); !ok {
		l.cancelled.Add(1)
		l.metrics.rejected.WithLabelValues(l.cfg.Name, schema, ReasonCancelled).Inc()
	}
}

func (l *level) reject(schema, reason string) *RejectedError {
	if reason == ReasonTimeout {
		l.timedOut.Add(1)
	} else {
		l.rejected.Add(1)
	}
	l.metrics.rejected.WithLabelValues(l.cfg.Name, schema, reason).Inc()
	return &RejectedError{PriorityLevel: l.cfg.Name, FlowSchema: schema, Reason: reason}
}

// release returns r's seats, corrects its queue's virtual time by its
// real execution time, and dispatches waiting requests. ran reports
// whether the request executed (its execution time is observed).
func (l *level) release(r *request, ran bool) {
	l.mu.Lock()
	if r.state != stateDispatched {
		l.mu.Unlock()
		return
	}
	now := l.now()
	executed := now.Sub(r.dispatched)
	l.syncDemandLocked(now)
	r.state = stateRemoved
	l.mu.seatsInUse -= r.width
	delete(l.mu.executing, r)
	if q := r.queue; q != nil && q.live {
		busy := q.busy()
		q.seatsInUse -= r.width
		l.correctLocked(q, r, executed)
		l.activeLocked(q, busy)
	}
	if ran && !r.adopted {
		l.mu.estimate.observe(executed)
	}
	l.dispatchLocked(now)
	l.unlock()
	l.flowMetrics(r.schema).executingSeats.Sub(float64(r.width))
	if ran {
		l.flowMetrics(r.schema).execution.Observe(executed.Seconds())
	}
}

// startLocked marks r dispatched and takes its seats.
func (l *level) startLocked(r *request) {
	l.mu.seatsInUse += r.width
	l.mu.executing[r] = struct{}{}
	l.dispatched.Add(1)
	r.state = stateDispatched
	l.signalLocked(r, nil)
	fm := l.flowMetrics(r.schema)
	fm.executingSeats.Add(float64(r.width))
	fm.dispatched.Inc()
}

// flowMetrics returns the metrics of schema's requests at l.
func (l *level) flowMetrics(schema string) *flowMetrics {
	if fm, ok := l.flows.Load(schema); ok {
		return fm.(*flowMetrics)
	}
	fm, _ := l.flows.LoadOrStore(schema, l.metrics.newFlowMetrics(l.cfg.Name, schema))
	return fm.(*flowMetrics)
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
