package apf

import (
	"cmp"
	"container/heap"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestElephantAndMice is issue 21's elephants-and-mice scenario on the
// fair-queuing algorithm alone, on a simulated clock: global-default's
// queuing (4 seats, 128 queues, hand size 6, 50 per queue), requests
// holding a seat 10-30 ms (uniform; capacity 200 requests/s), Poisson
// arrivals. Ten mice offer 5 % of the capacity each, first alone, then
// beside an elephant offering 1000 %. Every mouse request is served, the
// elephant gets what the mice leave (about 50 %), no more, and every
// mouse's p99 queue wait with the elephant is within 1.5× of its wait
// alone plus one mean execution time. The added execution time is the
// floor of non-preemptive seats: beside the elephant every seat is
// taken when a mouse arrives, and the mouse waits for one to be
// released (alone, it mostly finds one free). With the elephant, the
// kube-apiserver rule (R advancing at seats / busy queues, 3 s charged
// at dispatch) left the mice's p99 at 76-100 ms against 16-21 ms alone.
//
// That floor is also computed (miceFloor: the same arrivals, every seat
// given as soon as it is released to the mouse that has waited longest,
// else to the elephant), and the ten mice's p99 together beside the
// elephant is within 10 % of its p99: fair queuing gives the mice all
// that a scheduler could give them without preempting a request or
// leaving a seat idle while the elephant waits.
//
// A mouse makes about 200 requests in the default 20 s, so its p99 is
// its second-longest wait and varies by run: -mice-run sets a longer
// simulated run for the benchmark figures (docs/benchmarks.md),
// -mice-seed other arrivals and execution times, and the test logs how
// many mice met issue 21's target of 1.5× without the added execution
// time.
func TestElephantAndMice(t *testing.T) {
	const (
		seats   = 4
		service = 20 * time.Millisecond
	)
	run := *miceRunLength
	capacity := float64(seats) / service.Seconds()
	alone := runMice(t, seats, service, run, capacity, false)
	loaded := runMice(t, seats, service, run, capacity, true)
	floor := miceFloor(seats, service, run, capacity)
	met := 0
	for i := range 10 {
		a, l := alone.p99(i), loaded.p99(i)
		if l <= a*3/2 {
			met++
		}
		t.Logf("mouse-%d: p99 %s alone, %s with the elephant (%.2f×; %d requests; floor %s); %.1f%% / %.1f%% of capacity", i, a, l,
			float64(l)/float64(a), len(loaded.flows[i].waits), floor.p99(i), alone.share(i, run, capacity), loaded.share(i, run, capacity))
		if limit := a*3/2 + service; l > limit {
			t.Errorf("mouse-%d: p99 queue wait %s with the elephant, %s alone: over %s", i, l, a, limit)
		}
		if f := loaded.flows[i]; f.rejected > 0 || len(f.waits) < f.offered {
			t.Errorf("mouse-%d: %d of %d served, %d rejected", i, len(f.waits), f.offered, f.rejected)
		}
	}
	together, least := loaded.pooledP99(), floor.pooledP99()
	t.Logf("mice together: p99 %s alone, %s with the elephant, floor %s (%.2f×)", alone.pooledP99(), together, least, float64(together)/float64(least))
	if limit := least * 11 / 10; together > limit {
		t.Errorf("mice together: p99 queue wait %s with the elephant, over 1.1 × the floor %s", together, least)
	}
	e := loaded.share(10, run, capacity)
	mice := 0.0
	for i := range 10 {
		mice += loaded.share(i, run, capacity)
	}
	t.Logf("elephant: %.1f%% of capacity, %d rejected; mice %.1f%%; %d of 10 mice within 1.5× of their p99 alone", e, loaded.flows[10].rejected, mice, met)
	if e > 100-mice+2 || e < 100-mice-5 {
		t.Errorf("elephant got %.1f%% of capacity; the mice left %.1f%%", e, 100-mice)
	}
}

// miceRunLength is the simulated length of TestElephantAndMice's runs.
var miceRunLength = flag.Duration("mice-run", 20*time.Second, "simulated length of each TestElephantAndMice run")

// miceSeed seeds TestElephantAndMice's arrivals and execution times.
var miceSeed = flag.Uint64("mice-seed", 1, "seed of TestElephantAndMice's arrivals and execution times")

// miceFlow is one flow's outcome in runMice.
type miceFlow struct {
	offered, rejected int
	// served counts the requests dispatched before the run's end; waits
	// has the queue wait of every request dispatched.
	served int
	waits  []time.Duration
}

type miceRun struct{ flows [11]*miceFlow }

func (r *miceRun) p99(i int) time.Duration {
	w := slices.Clone(r.flows[i].waits)
	if len(w) == 0 {
		return 0
	}
	slices.Sort(w)
	return w[int(float64(len(w)-1)*0.99)]
}

// share is the percentage of capacity flow i was served during the run.
func (r *miceRun) share(i int, run time.Duration, capacity float64) float64 {
	return 100 * float64(r.flows[i].served) / run.Seconds() / capacity
}

// completion is a dispatched request's end, on the simulated clock.
type completion struct {
	at time.Time
	r  *request
}

type completions []completion

func (c completions) Len() int           { return len(c) }
func (c completions) Less(i, j int) bool { return c[i].at.Before(c[j].at) }
func (c completions) Swap(i, j int)      { c[i], c[j] = c[j], c[i] }
func (c *completions) Push(x any)        { *c = append(*c, x.(completion)) }
func (c *completions) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}

// runMice simulates the ten mice (flows 0-9) and, with elephant, flow
// 10 for run, event by event, on global-default's queuing.
func runMice(t *testing.T, seats int, service, run time.Duration, capacity float64, elephant bool) *miceRun {
	t.Helper()
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	l, err := newLevel(PriorityLevel{Name: "global-default", Seats: seats, Queuing: &Queuing{Queues: 128, HandSize: 6, QueueLengthLimit: 50}}, m)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Unix(1_000_000, 0)
	now := start
	l.now = func() time.Time { return now }
	l.mu.syncedAt = now

	res := &miceRun{}
	flows := 10
	if elephant {
		flows = 11
	}
	rngs := make([]*rand.Rand, flows)
	next := make([]time.Time, flows)
	interval := make([]time.Duration, flows)
	for f := range 11 {
		res.flows[f] = &miceFlow{}
	}
	for f := range flows {
		rate := 0.05 * capacity
		if f == 10 {
			rate = 10 * capacity
		}
		interval[f] = time.Duration(float64(time.Second) / rate)
		rngs[f] = rand.New(rand.NewPCG(uint64(f), *miceSeed))
		next[f] = start.Add(time.Duration(rngs[f].ExpFloat64() * float64(interval[f])))
	}
	flowOf := map[*request]int{}
	arrived := map[*request]time.Time{}
	var queued []*request
	var done completions
	exec := rand.New(rand.NewPCG(99, *miceSeed))
	// started schedules the completions of the requests dispatched since
	// the last event.
	started := func() {
		queued = slices.DeleteFunc(queued, func(r *request) bool {
			if r.state != stateDispatched {
				return false
			}
			f := res.flows[flowOf[r]]
			f.waits = append(f.waits, r.dispatched.Sub(arrived[r]))
			if r.dispatched.Before(start.Add(run)) {
				f.served++
			}
			// Execution times vary: uniform within ±50 % of service.
			d := service/2 + time.Duration(exec.Int64N(int64(service)))
			heap.Push(&done, completion{at: r.dispatched.Add(d), r: r})
			return true
		})
	}
	end := start.Add(run)
	for {
		// The next event: the earliest arrival before the end, or the
		// earliest completion.
		f := -1
		for i := range flows {
			if next[i].Before(end) && (f < 0 || next[i].Before(next[f])) {
				f = i
			}
		}
		if len(done) > 0 && (f < 0 || !next[f].Before(done[0].at)) {
			c := heap.Pop(&done).(completion)
			now = c.at
			l.release(c.r, true)
			started()
			continue
		}
		if f < 0 {
			break
		}
		now = next[f]
		next[f] = now.Add(time.Duration(rngs[f].ExpFloat64() * float64(interval[f])))
		r := &request{schema: "global-default", flow: flowHash("global-default", fmt.Sprintf("flow-%d", f)), ready: make(chan struct{})}
		res.flows[f].offered++
		l.mu.Lock()
		rej := l.enqueueLocked(r, 1, now)
		l.mu.Unlock()
		if rej != nil {
			res.flows[f].rejected++
			continue
		}
		flowOf[r], arrived[r] = f, now
		queued = append(queued, r)
		started()
	}
	if n := l.seatsInUse(); n != 0 || len(queued) != 0 {
		t.Fatalf("at the end %d seats held, %d requests queued", n, len(queued))
	}
	return res
}

// miceFloor is the least queue wait any scheduler that neither preempts
// nor idles a seat could give the mice beside the elephant: the same
// arrivals as runMice, every seat taken, as soon as it is released, by
// the mouse request that has waited longest, or by the elephant, always
// backlogged, when no mouse waits. It returns the waits in a miceRun.
func miceFloor(seats int, service, run time.Duration, capacity float64) *miceRun {
	start := time.Unix(1_000_000, 0)
	end := start.Add(run)
	type arrival struct {
		at   time.Time
		flow int
	}
	var arrivals []arrival
	interval := time.Duration(float64(time.Second) / (0.05 * capacity))
	for f := range 10 {
		rng := rand.New(rand.NewPCG(uint64(f), *miceSeed))
		for at := start.Add(time.Duration(rng.ExpFloat64() * float64(interval))); at.Before(end); at = at.Add(time.Duration(rng.ExpFloat64() * float64(interval))) {
			arrivals = append(arrivals, arrival{at, f})
		}
	}
	slices.SortStableFunc(arrivals, func(a, b arrival) int { return a.at.Compare(b.at) })
	exec := rand.New(rand.NewPCG(99, *miceSeed))
	duration := func() time.Duration { return service/2 + time.Duration(exec.Int64N(int64(service))) }
	res := &miceRun{}
	for f := range res.flows {
		res.flows[f] = &miceFlow{}
	}
	// free is when each seat is next released; the elephant holds them
	// all from the start.
	free := make([]time.Time, seats)
	for i := range free {
		free[i] = start.Add(duration())
	}
	for _, a := range arrivals {
		// Seats released before a's arrival went to the elephant (the
		// mice before a took theirs already); a takes the first seat
		// released from its arrival on.
		for {
			i := 0
			for j := range free {
				if free[j].Before(free[i]) {
					i = j
				}
			}
			if !free[i].Before(a.at) {
				res.flows[a.flow].waits = append(res.flows[a.flow].waits, free[i].Sub(a.at))
				free[i] = free[i].Add(duration())
				break
			}
			free[i] = free[i].Add(duration())
		}
	}
	return res
}

// pooledP99 is the p99 of the waits of flows 0-9 together.
func (r *miceRun) pooledP99() time.Duration {
	var w []time.Duration
	for _, f := range r.flows[:10] {
		w = append(w, f.waits...)
	}
	slices.SortFunc(w, cmp.Compare)
	return w[int(float64(len(w)-1)*0.99)]
}
