package flowcontrolclient

import (
	"slices"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/polltest"
)

// TestGrantsReRegisteredWithNewTerm: when an answer names a new term (a
// new leader), the client sends the grants it still holds of the old
// term to AdoptGrants — not those whose requests ended — once; grants
// of the new term are not sent; a service naming no term is never asked.
func TestGrantsReRegisteredWithNewTerm(t *testing.T) {
	f := &fakeFlowControl{batch: true, term: "t1"}
	c, _ := start(t, f, true)
	gs := acquireN(t, c, 3)
	gs[0].Release() // ended before the change: not re-registered

	f.mu.Lock()
	f.term = "t2"
	f.mu.Unlock()
	gs = append(gs, acquireN(t, c, 1)...) // the answer naming t2
	polltest.Until(t, 10*time.Second, "the old term's grants re-registered", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.adopted) > 0
	})
	// Give a second, wrong, AdoptGrants the time to show.
	acquireN(t, c, 1)
	time.Sleep(100 * time.Millisecond)
	f.mu.Lock()
	adopted := slices.Clone(f.adopted)
	f.mu.Unlock()
	if len(adopted) != 1 {
		t.Fatalf("AdoptGrants calls %v, want one", adopted)
	}
	got := slices.Sorted(slices.Values(adopted[0]))
	if want := []string{"g-2", "g-3"}; !slices.Equal(got, want) {
		t.Fatalf("re-registered %v, want the old term's running grants %v", got, want)
	}
	for _, g := range gs {
		g.Release()
	}
	polltest.Until(t, 10*time.Second, "every grant released once", func() bool {
		released, _ := f.snapshot()
		return released["g-1"] == 1 && released["g-2"] == 1 && released["g-3"] == 1 && released["g-4"] == 1
	})

	// A service without terms: nothing is re-registered.
	old := &fakeFlowControl{batch: true}
	c2, _ := start(t, old, true)
	held := acquireN(t, c2, 2)
	defer held[0].Release()
	defer held[1].Release()
	c2.grants.observe("") // as every answer of such a service
	if _, stale := c2.grants.stale(); len(stale) != 0 {
		t.Fatalf("grants of a service without terms are stale: %v", stale)
	}
}

// TestNewTermAdoptsBeforeGranting: a leader of a new term that answers
// NEW_TERM to a request naming the old one gets this gateway's running
// grants (AdoptGrants) before the request asks again and is granted, so
// that the new leader counts them before it hands out more seats.
func TestNewTermAdoptsBeforeGranting(t *testing.T) {
	f := &fakeFlowControl{batch: true, term: "t1", newTerm: true}
	c, _ := start(t, f, true)
	gs := acquireN(t, c, 2)
	defer gs[0].Release()
	defer gs[1].Release()

	f.mu.Lock()
	f.term, f.events = "t2", nil
	f.mu.Unlock()
	acquireN(t, c, 1)[0].Release()
	f.mu.Lock()
	events := slices.Clone(f.events)
	adopted := slices.Clone(f.adopted)
	f.mu.Unlock()
	if want := []string{"new-term", "adopt", "grant g-3"}; !slices.Equal(events, want) {
		t.Fatalf("after the term changed: %v, want %v", events, want)
	}
	if len(adopted) != 1 || !slices.Equal(slices.Sorted(slices.Values(adopted[0])), []string{"g-1", "g-2"}) {
		t.Fatalf("re-registered %v, want the running grants g-1 and g-2", adopted)
	}
}
