package apf

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// sim drives one level synchronously on a fake clock: no goroutine, no
// timer, so every outcome is decided by the algorithm alone.
type sim struct {
	t   *testing.T
	l   *level
	now time.Time
	// live are the requests submitted and not yet released or removed.
	live []*request
}

func newSim(t *testing.T, seats, queues, handSize int) *sim {
	t.Helper()
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	s := &sim{t: t, now: time.Unix(1_000_000, 0)}
	l, err := newLevel(PriorityLevel{Name: "sim", Seats: seats, Queuing: &Queuing{Queues: queues, HandSize: handSize, QueueLengthLimit: 1 << 20}}, m)
	if err != nil {
		t.Fatal(err)
	}
	l.now = func() time.Time { return s.now }
	l.mu.syncedAt = s.now
	s.l = l
	return s
}

// submit queues a request of flow; it reports the rejection, if any.
func (s *sim) submit(flow string, width int) (*request, error) {
	r := &request{schema: "s", flow: flowHash("s", flow), ready: make(chan struct{})}
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	if rej := s.l.enqueueLocked(r, uint32(width), s.now); rej != nil {
		return nil, rej
	}
	s.live = append(s.live, r)
	s.check()
	return r, nil
}

// cancel takes r out of its queue (as a cancelled Acquire does) or, when
// it was dispatched, releases it.
func (s *sim) cancel(r *request) {
	s.l.mu.Lock()
	if r.state == stateQueued {
		s.l.syncDemandLocked(s.now)
		s.l.removeLocked(r)
		s.l.dispatchLocked(s.now)
		s.forget(r)
		s.check()
		s.l.mu.Unlock()
		return
	}
	s.l.mu.Unlock()
	s.release(r)
}

func (s *sim) release(r *request) {
	s.l.release(r, true)
	s.l.mu.Lock()
	s.forget(r)
	s.check()
	s.l.mu.Unlock()
}

func (s *sim) forget(r *request) {
	s.live = slices.DeleteFunc(s.live, func(x *request) bool { return x == r })
}

func (s *sim) executing() []*request {
	s.l.mu.Lock()
	defer s.l.mu.Unlock()
	var out []*request
	for _, r := range s.live {
		if r.state == stateDispatched {
			out = append(out, r)
		}
	}
	return out
}

// check verifies the level's invariants against the requests the sim
// knows of; l.mu is held.
func (s *sim) check() {
	s.t.Helper()
	l := s.l
	inUse, waiting, seatsWaiting := 0, 0, 0
	for _, r := range s.live {
		switch r.state {
		case stateDispatched:
			inUse += r.width
		case stateQueued:
			waiting++
			seatsWaiting += r.width
		default:
			s.t.Fatalf("a live request in state %d", r.state)
		}
	}
	active, queued := 0, 0
	for _, q := range l.mu.queues {
		if q.busy() {
			active++
		}
		queued += len(q.reqs)
		if q.seatsInUse < 0 || q.seatsWaiting < 0 {
			s.t.Fatalf("a queue with %d seats in use, %d waiting", q.seatsInUse, q.seatsWaiting)
		}
	}
	switch {
	case l.mu.seatsInUse < 0:
		s.t.Fatalf("seats in use %d: negative", l.mu.seatsInUse)
	case l.mu.seatsInUse != inUse:
		s.t.Fatalf("seats in use %d, but the dispatched requests hold %d: leaked", l.mu.seatsInUse, inUse)
	case l.mu.waiting != waiting || queued != waiting || l.mu.seatsWaiting != seatsWaiting:
		s.t.Fatalf("waiting %d (in queues %d, seats %d), want %d (seats %d)", l.mu.waiting, queued, l.mu.seatsWaiting, waiting, seatsWaiting)
	case l.mu.active != active:
		s.t.Fatalf("active queues %d, counted %d", l.mu.active, active)
	}
}

// hand returns the queues flow is dealt.
func (s *sim) hand(flow string) []int {
	var cards []int
	s.l.dealer.deal(flowHash("s", flow), func(c int) { cards = append(cards, c) })
	return cards
}

// TestSeatSecondsFairness: two flows with endless backlogs share one
// seat; one's requests run 1s, the other's 0.1s. Fair queuing in
// seat-seconds (the estimate corrected by the real execution time at
// release) gives each about half the seat's time, so the short flow
// runs about ten times as many requests. Fairness in requests
// dispatched would give the long flow 10/11 of the time.
func TestSeatSecondsFairness(t *testing.T) {
	s := newSim(t, 1, 64, 1)
	long, short := "long", ""
	for i := 0; short == ""; i++ {
		if f := fmt.Sprintf("short-%d", i); s.hand(f)[0] != s.hand(long)[0] {
			short = f
		}
	}
	service := map[uint64]time.Duration{flowHash("s", long): time.Second, flowHash("s", short): 100 * time.Millisecond}
	used := map[uint64]time.Duration{}
	count := map[uint64]int{}
	for range 2000 {
		for _, f := range []string{long, short} {
			if _, err := s.submit(f, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	for s.now.Before(time.Unix(1_000_000, 0).Add(100 * time.Second)) {
		ex := s.executing()
		if len(ex) != 1 {
			t.Fatalf("%d requests executing on one seat", len(ex))
		}
		r := ex[0]
		s.now = s.now.Add(service[r.flow])
		used[r.flow] += service[r.flow]
		count[r.flow]++
		s.release(r)
	}
	l, sh := used[flowHash("s", long)], used[flowHash("s", short)]
	t.Logf("long: %d requests, %s; short: %d requests, %s", count[flowHash("s", long)], l, count[flowHash("s", short)], sh)
	if ratio := l.Seconds() / sh.Seconds(); ratio < 0.8 || ratio > 1.25 {
		t.Fatalf("seat time long/short = %.2f, want about 1", ratio)
	}
}

// TestDispatchByVirtualFinishTime: one seat, random flows, arrival
// times and execution times; each release dispatches the head whose
// virtual finish time is the least of all heads: its queue's nextR
// (after the released request's correction, and never below the R at
// which the head arrived) + width × the level's estimate (after it
// took in the released request's time), computed here from the queues'
// state before the release.
func TestDispatchByVirtualFinishTime(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := newSim(t, 1, 32, 2)
	for i := range 300 {
		if _, err := s.submit(fmt.Sprintf("f%d", rng.IntN(20)), 1); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			s.now = s.now.Add(time.Duration(rng.IntN(500)) * time.Millisecond)
		}
	}
	checked := 0
	for len(s.live) > 0 {
		ex := s.executing()
		if len(ex) != 1 {
			t.Fatalf("%d executing on one seat", len(ex))
		}
		victim := ex[0]
		s.now = s.now.Add(time.Duration(1+rng.IntN(2000)) * time.Millisecond)
		executed := s.now.Sub(victim.dispatched)
		best := -1.0
		finish := map[*queue]float64{}
		s.l.mu.Lock()
		est := s.l.mu.estimate
		est.observe(executed)
		for _, q := range s.l.mu.queues {
			if len(q.reqs) == 0 {
				continue
			}
			next := q.nextR
			if q == victim.queue {
				next -= victim.charged - executed.Seconds()
			}
			next = max(next, q.reqs[0].arrivalR)
			finish[q] = next + est.get()
			if best < 0 || finish[q] < best {
				best = finish[q]
			}
		}
		s.l.mu.Unlock()
		s.release(victim)
		if best < 0 {
			continue // nothing was queued
		}
		ex = s.executing()
		if len(ex) != 1 {
			t.Fatalf("%d executing after a release with requests queued", len(ex))
		}
		if got := finish[ex[0].queue]; got-best > 1e-9 || best-got > 1e-9 {
			t.Fatalf("dispatched a head finishing at %f; the least was %f", got, best)
		}
		checked++
	}
	if checked < 250 {
		t.Fatalf("only %d dispatches checked", checked)
	}
}

// TestTiedHeadsFirstComeFirstServed: one seat held, an elephant queues
// 30 requests, then 20 flows that were idle queue one each. All start at
// the same virtual time, so their heads tie: the idle flows, in the
// least loaded queues, go before the elephant, and among themselves in
// the order they were queued, whatever queues they were dealt; then the
// elephant.
func TestTiedHeadsFirstComeFirstServed(t *testing.T) {
	s := newSim(t, 1, 128, 6)
	held, err := s.submit("holder", 1)
	if err != nil {
		t.Fatal(err)
	}
	var order []*request
	name := map[*request]string{}
	for range 30 {
		r, err := s.submit("elephant", 1)
		if err != nil {
			t.Fatal(err)
		}
		name[r] = "elephant"
	}
	for i := range 20 {
		s.now = s.now.Add(time.Millisecond)
		f := fmt.Sprintf("mouse-%d", i)
		r, err := s.submit(f, 1)
		if err != nil {
			t.Fatal(err)
		}
		name[r] = f
		order = append(order, r)
	}
	var got []string
	running := held
	for len(got) < 50 {
		s.now = s.now.Add(10 * time.Millisecond)
		s.release(running)
		ex := s.executing()
		if len(ex) != 1 {
			t.Fatalf("%d executing on one seat", len(ex))
		}
		running = ex[0]
		got = append(got, name[running])
	}
	var want []string
	for _, r := range order {
		want = append(want, name[r])
	}
	for range 30 {
		want = append(want, "elephant")
	}
	if !slices.Equal(got, want) {
		t.Fatalf("dispatched in the order\n%v\nwant\n%v", got, want)
	}
	s.release(running)
}

// TestMouseNotStarved: elephants with long backlogs share some of a
// mouse flow's queues; the mouse, dealt a hand with a queue none of them
// uses, has each of its requests dispatched within about one round of
// the busy queues, however long the elephants' backlogs.
func TestMouseNotStarved(t *testing.T) {
	const seats, queues, hand = 4, 16, 4
	s := newSim(t, seats, queues, hand)
	mouse := "mouse"
	mh := s.hand(mouse)
	var elephants []string
	used := map[int]bool{}
	for i := 0; len(elephants) < 6; i++ {
		f := fmt.Sprintf("elephant-%d", i)
		h := s.hand(f)
		shares := slices.ContainsFunc(h, func(c int) bool { return slices.Contains(mh, c) })
		free := 0
		for _, c := range mh {
			if !used[c] && !slices.Contains(h, c) {
				free++
			}
		}
		if shares && free > 0 {
			elephants = append(elephants, f)
			for _, c := range h {
				used[c] = true
			}
		}
	}
	const service = 100 * time.Millisecond
	for range 100 {
		for _, e := range elephants {
			if _, err := s.submit(e, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	busy := len(used)
	bound := time.Duration(busy/seats+2) * service
	var worst time.Duration
	for range 40 {
		m, err := s.submit(mouse, 1)
		if err != nil {
			t.Fatal(err)
		}
		submitted := s.now
		for m.state != stateDispatched {
			ex := s.executing()
			// Seats are released in dispatch order, one service time apart.
			s.now = s.now.Add(service / seats)
			s.release(ex[0])
		}
		if w := s.now.Sub(submitted); w > worst {
			worst = w
		}
		s.now = s.now.Add(service)
		s.release(m)
	}
	t.Logf("%d busy queues, %d seats: the mouse waited at most %s (bound %s)", busy, seats, worst, bound)
	if worst > bound {
		t.Fatalf("the mouse waited %s, more than %s", worst, bound)
	}
}

// TestSeatsNeverNegativeOrLeaked: random submissions of random widths,
// cancellations, releases, clock steps and reconfigurations, many
// seeds; after every step the level's counts match its requests, and
// once everything is released nothing is held.
func TestSeatsNeverNegativeOrLeaked(t *testing.T) {
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 7))
		s := newSim(t, 1+rng.IntN(8), 1+rng.IntN(16), 1)
		for range 2000 {
			switch op := rng.IntN(10); {
			case op < 4:
				_, _ = s.submit(fmt.Sprintf("f%d", rng.IntN(12)), rng.IntN(4))
			case op < 5 && len(s.live) > 0:
				s.cancel(s.live[rng.IntN(len(s.live))])
			case op < 8:
				if ex := s.executing(); len(ex) > 0 {
					s.release(ex[rng.IntN(len(ex))])
				}
			case op < 9:
				s.now = s.now.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
			default:
				queues := 1 + rng.IntN(16)
				cfg := PriorityLevel{Name: "sim", Seats: 1 + rng.IntN(8), Queuing: &Queuing{Queues: queues, HandSize: 1 + rng.IntN(min(queues, 4)), QueueLengthLimit: 1 << 20}}
				if err := s.l.reconfigure(cfg); err != nil {
					t.Fatal(err)
				}
				s.l.mu.Lock()
				s.check()
				s.l.mu.Unlock()
			}
		}
		for len(s.live) > 0 {
			s.cancel(s.live[0])
		}
		s.l.mu.Lock()
		if s.l.mu.seatsInUse != 0 || s.l.mu.waiting != 0 || s.l.mu.active != 0 {
			t.Fatalf("seed %d: at the end %d seats, %d waiting, %d active", seed, s.l.mu.seatsInUse, s.l.mu.waiting, s.l.mu.active)
		}
		s.l.mu.Unlock()
	}
}

// TestEstimateFollowsExecutionTimes: a level charges the 3 s guess until
// a request finishes, then the moving average of real execution times;
// and whatever the estimate was at dispatch, a queue ends up charged
// exactly the seat-seconds its requests ran.
func TestEstimateFollowsExecutionTimes(t *testing.T) {
	s := newSim(t, 2, 1, 1)
	start := s.l.mu.queues[0].nextR
	first, err := s.submit("f", 1)
	if err != nil {
		t.Fatal(err)
	}
	if first.charged != EstimatedServiceTime.Seconds() {
		t.Fatalf("first request charged %v seat-seconds, want the %s guess", first.charged, EstimatedServiceTime)
	}
	// The queue stays busy from here on (the next request is queued
	// before the last is released), so nothing resets its nextR. The
	// requests are 20 ms and two seats wide; each is dispatched at one
	// estimate and released at another.
	next, err := s.submit("f", 2)
	if err != nil {
		t.Fatal(err)
	}
	s.now = s.now.Add(40 * time.Millisecond)
	s.release(first)
	ran := 40 * time.Millisecond
	if got := s.l.mu.estimate.get(); got != 0.04 {
		t.Fatalf("estimate %v after one 40ms request, want 0.04", got)
	}
	for i := range 200 {
		r := next
		if r.state != stateDispatched {
			t.Fatalf("request %d not dispatched", i)
		}
		if i < 199 {
			if next, err = s.submit("f", 2); err != nil {
				t.Fatal(err)
			}
		}
		s.now = s.now.Add(20 * time.Millisecond)
		ran += 2 * 20 * time.Millisecond
		s.release(r)
		if i < 199 && next.charged != 2*s.l.mu.estimate.get() {
			t.Fatalf("request %d charged %v, want 2 × the estimate %v", i+1, next.charged, s.l.mu.estimate.get())
		}
	}
	if got := s.l.mu.estimate.get(); got < 0.0199 || got > 0.0201 {
		t.Fatalf("estimate %v after 200 requests of 20ms, want about 0.02", got)
	}
	if got, want := s.l.mu.queues[0].nextR-start, ran.Seconds(); got-want > 1e-9 || want-got > 1e-9 {
		t.Fatalf("queue charged %v seat-seconds, its requests ran %v", got, want)
	}
}
