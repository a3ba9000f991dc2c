package apf

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// TestAllocate: the amounts stay within their bounds, add up to the
// total, and are proportional to the targets between them.
func TestAllocate(t *testing.T) {
	for _, tc := range []struct {
		total float64
		items [][3]float64
		want  []float64
	}{
		{100, [][3]float64{{10, 100, 30}, {10, 100, 10}}, []float64{75, 25}},
		{100, [][3]float64{{50, 155, 150}, {0, 50, 0}, {5, 110, 5}}, []float64{95, 0, 5}},
		{10, [][3]float64{{20, 30, 25}, {5, 5, 5}}, []float64{20, 5}},    // lower bounds exceed the total
		{500, [][3]float64{{0, 30, 25}, {0, 50, 50}}, []float64{30, 50}}, // upper bounds fall short
	} {
		got := allocate(tc.total, tc.items)
		for i := range got {
			if math.Abs(got[i]-tc.want[i]) > 0.01 {
				t.Errorf("allocate(%v, %v) = %v, want %v", tc.total, tc.items, got, tc.want)
				break
			}
		}
	}
}

// TestBorrowing: a level whose demand exceeds its nominal limit borrows
// what an idle level may lend: after one period it runs twice its
// nominal seats, its queued requests dispatched, the idle level keeps
// nothing it may lend, and the limits add up to the server limit. A
// level whose borrowing limit is 0 never exceeds its nominal limit.
func TestBorrowing(t *testing.T) {
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { return now }
	mk := func(name string, nominal, lendable, borrowing int) *level {
		l, err := newLevel(PriorityLevel{Name: name, Nominal: nominal, MinSeats: nominal - lendable, MaxSeats: nominal + borrowing,
			Seats: nominal - lendable/2, Queuing: &Queuing{Queues: 8, HandSize: 2, QueueLengthLimit: 1000}}, m)
		if err != nil {
			t.Fatal(err)
		}
		l.now, l.mu.syncedAt = clock, now
		return l
	}
	busy, idle, strict := mk("busy", 50, 0, 105), mk("idle", 50, 50, 105), mk("strict", 5, 0, 0)
	levels := []*level{busy, idle, strict}
	submit := func(l *level, n int) {
		for i := range n {
			r := &request{schema: "s", flow: flowHash("s", fmt.Sprint(i)), ready: make(chan struct{})}
			l.mu.Lock()
			if rej := l.enqueueLocked(r, 1, now); rej != nil {
				t.Fatal(rej)
			}
			l.mu.Unlock()
		}
	}
	submit(busy, 150)
	submit(strict, 20)
	if busy.seatsInUse() != 50 || idle.cfg.Seats != 25 {
		t.Fatalf("before: busy uses %d, idle has %d seats", busy.seatsInUse(), idle.cfg.Seats)
	}
	now = now.Add(10 * time.Second)
	adjustBorrowing(levels, 105, now)
	seats := func(l *level) int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.cfg.Seats
	}
	b, i, s := seats(busy), seats(idle), seats(strict)
	t.Logf("after one period: busy %d, idle %d, strict %d seats", b, i, s)
	if b < 95 || i > 5 || s != 5 || b+i+s < 104 || b+i+s > 106 {
		t.Fatalf("busy %d, idle %d, strict %d seats: want busy ≈ 100, idle ≈ 0, strict 5, about 105 in all", b, i, s)
	}
	if got := busy.seatsInUse(); got != b {
		t.Fatalf("busy runs %d requests with %d seats and 100 queued", got, b)
	}
}
