package apf

import (
	"math"
	"testing"
	"time"
)

// TestDumpWorkFromEstimate: a queue's waiting work is its waiting seats
// times the level's execution estimate — the 3 s guess before any
// request has run, then the real execution times.
func TestDumpWorkFromEstimate(t *testing.T) {
	s := newSim(t, 2, 1, 1)
	a, err := s.submit("a", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.submit("b", 2); err != nil { // queued behind a
		t.Fatal(err)
	}
	if got, want := s.l.dump().Queues[0].WorkWaiting, 2*EstimatedServiceTime.Seconds(); got != want {
		t.Fatalf("before any request ran: work waiting %vss, want %vss", got, want)
	}
	s.now = s.now.Add(200 * time.Millisecond)
	s.release(a) // ran 200ms: b is dispatched, the estimate is 0.2s
	if _, err := s.submit("c", 1); err != nil {
		t.Fatal(err)
	}
	q := s.l.dump().Queues[0]
	if q.SeatsWaiting != 1 || math.Abs(q.WorkWaiting-0.2) > 1e-9 {
		t.Fatalf("after a request ran 200ms: %d seats waiting, work %vss, want 1 and 0.2ss", q.SeatsWaiting, q.WorkWaiting)
	}
}
