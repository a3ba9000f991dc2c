package apf

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// running is a gateway's running request: its grant, and the term of the
// leader that holds it (the one that granted or adopted it).
type running struct {
	grant Grant
	term  int
}

// TestSeatsNeverLeakedAcrossLeaderChange: three replicas, one leading at
// a time; two gateways acquire from the leader and release to whoever
// leads when their request ends (as flowcontrolclient does). The leader
// changes at random, the old one forgetting what it held (Forget, as the
// service does when a term ends); each gateway re-registers the grants
// it still holds with the new leader (Adopt) some steps later, and a
// release may overtake that Adopt (the grant is then in the Adopt too).
//
// After every step each replica's seats in use are what the grants it
// holds add up to, never negative; once both gateways have re-registered,
// the leader's seats in use are exactly the seats of every running
// request (a grant held across the change is counted by the new leader).
// A grant held by the leader is released exactly once (its Release
// succeeds); at the end, with every request finished, no replica holds a
// seat.
func TestSeatsNeverLeakedAcrossLeaderChange(t *testing.T) {
	const seats = 6
	ctx := context.Background()
	adoptedAny := false
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 11))
		var replicas []*Controller
		for range 3 {
			replicas = append(replicas, newFixed(t, Config{BorrowingPeriod: -1}, levels{catchAll: seats}))
		}
		leader, term := replicas[0], 0
		gateways := []string{"gw-a", "gw-b"}
		// runs are each gateway's running requests; raced are grants
		// whose release went out after the gateway took the snapshot of
		// its next Adopt.
		runs := map[string][]running{}
		raced := map[string][]Grant{}
		adopt := func(what, gw string) {
			var grants []Grant
			for i, r := range runs[gw] {
				if r.term != term {
					grants = append(grants, r.grant)
					runs[gw][i].term = term
				}
			}
			nRaced := len(raced[gw])
			grants = append(grants, raced[gw]...)
			raced[gw] = nil
			if len(grants) == 0 {
				return
			}
			res, err := leader.Adopt(ctx, gw, grants)
			if err != nil {
				t.Fatalf("%s: adopt: %v", what, err)
			}
			if want := (AdoptResult{Adopted: len(grants) - nRaced, Released: nRaced}); res != want {
				t.Fatalf("%s: adopt of %d grants (%d released before): %+v, want %+v", what, len(grants), nRaced, res, want)
			}
			adoptedAny = adoptedAny || res.Adopted > 0
		}
		for step := range 1000 {
			what := fmt.Sprintf("seed %d step %d", seed, step)
			gw := gateways[rng.IntN(len(gateways))]
			switch op := rng.IntN(20); {
			case op < 9:
				// An anonymous request: catch-all, which rejects when full.
				d := Digest{User: UserAnonymous, Verb: "get", Resource: "pods", IsResourceRequest: true, Width: uint32(rng.IntN(4))}
				g, err := leader.Acquire(ctx, gw, d)
				switch {
				case err == nil:
					runs[gw] = append(runs[gw], running{grant: g, term: term})
				case !errors.Is(err, ErrRejected):
					t.Fatalf("%s: %v", what, err)
				}
			case op < 16 && len(runs[gw]) > 0:
				i := rng.IntN(len(runs[gw]))
				r := runs[gw][i]
				runs[gw] = append(runs[gw][:i], runs[gw][i+1:]...)
				err := leader.Release(ctx, r.grant.ID)
				switch {
				case r.term == term && err != nil:
					t.Fatalf("%s: release of a grant the leader holds: %v", what, err)
				case r.term != term && !errors.Is(err, ErrUnknownGrant):
					t.Fatalf("%s: release of a grant not adopted yet: %v, want ErrUnknownGrant", what, err)
				case r.term != term && rng.IntN(2) == 0:
					// The release overtook the Adopt that carries it.
					raced[gw] = append(raced[gw], r.grant)
				}
			case op < 19:
				adopt(what, gw)
			default:
				leader.Forget()
				leader, term = replicas[rng.IntN(len(replicas))], term+1
				for _, gw := range gateways {
					raced[gw] = nil // sent to the old leader, if ever
				}
			}
			for i, r := range replicas {
				checkHeld(t, fmt.Sprintf("%s replica %d", what, i), r)
			}
			synced, want := true, 0
			for _, gw := range gateways {
				for _, r := range runs[gw] {
					synced = synced && r.term == term
					want += r.grant.Seats
				}
			}
			if st, _ := leader.LevelStats(LevelCatchAll); synced && st.SeatsInUse != want {
				t.Fatalf("%s: the leader has %d seats in use, its gateways' running requests %d", what, st.SeatsInUse, want)
			}
		}
		for _, gw := range gateways {
			adopt(fmt.Sprintf("seed %d end", seed), gw)
			for _, r := range runs[gw] {
				if err := leader.Release(ctx, r.grant.ID); err != nil {
					t.Fatalf("seed %d: release at the end: %v", seed, err)
				}
			}
		}
		for i, r := range replicas {
			if r != leader {
				r.Forget()
			}
			if st, _ := r.LevelStats(LevelCatchAll); st.SeatsInUse != 0 || st.Queued != 0 {
				t.Fatalf("seed %d: replica %d holds %d seats, %d queued, with no request running", seed, i, st.SeatsInUse, st.Queued)
			}
		}
	}
	if !adoptedAny {
		t.Fatal("no grant was ever adopted: the test exercised nothing")
	}
}

// TestAdopt: a grant adopted from a previous leader takes its seats at
// once, even over the level's limit (then nothing is dispatched until
// enough are released), and is released once under its id; bad input
// adopts nothing.
func TestAdopt(t *testing.T) {
	ctx := context.Background()
	c := newFixed(t, Config{BorrowingPeriod: -1}, levels{catchAll: 2})
	anon := Digest{User: UserAnonymous, Verb: "get", Resource: "pods", IsResourceRequest: true}
	g, err := c.Acquire(ctx, "gw", anon)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Adopt(ctx, "gw", []Grant{
		{ID: "old-1", FlowSchema: SchemaCatchAll, PriorityLevel: LevelCatchAll, Seats: 2},
		{ID: g.ID, FlowSchema: SchemaCatchAll, PriorityLevel: LevelCatchAll, Seats: 1},
		{ID: "old-2", FlowSchema: "gone", PriorityLevel: "no-such-level", Seats: 1},
		{ID: "old-3", FlowSchema: SchemaExempt, PriorityLevel: LevelExempt},
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := (AdoptResult{Adopted: 1, Held: 1, Unknown: 2}); res != want {
		t.Fatalf("adopt: %+v, want %+v", res, want)
	}
	if st, _ := c.LevelStats(LevelCatchAll); st.SeatsInUse != 3 {
		t.Fatalf("seats in use %d, want 3 (1 granted + 2 adopted, over the limit of 2)", st.SeatsInUse)
	}
	checkHeld(t, "after adopt", c)
	if _, err := c.Acquire(ctx, "gw", anon); !errors.Is(err, ErrRejected) {
		t.Fatalf("acquire on a level over its limit: %v, want rejected", err)
	}
	if err := c.Release(ctx, "old-1"); err != nil {
		t.Fatalf("release of the adopted grant: %v", err)
	}
	if err := c.Release(ctx, "old-1"); !errors.Is(err, ErrUnknownGrant) {
		t.Fatalf("second release of the adopted grant: %v, want ErrUnknownGrant", err)
	}
	// A release that overtook its grant's Adopt: the Adopt charges nothing.
	if err := c.Release(ctx, "old-4"); !errors.Is(err, ErrUnknownGrant) {
		t.Fatalf("release before adopt: %v, want ErrUnknownGrant", err)
	}
	res, err = c.Adopt(ctx, "gw", []Grant{{ID: "old-4", FlowSchema: SchemaCatchAll, PriorityLevel: LevelCatchAll, Seats: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if want := (AdoptResult{Released: 1}); res != want {
		t.Fatalf("adopt of a released grant: %+v, want %+v", res, want)
	}
	if st, _ := c.LevelStats(LevelCatchAll); st.SeatsInUse != 1 {
		t.Fatalf("after the adopt of a released grant: seats in use %d, want 1", st.SeatsInUse)
	}
	if err := c.Release(ctx, g.ID); err != nil {
		t.Fatal(err)
	}

	for _, bad := range []struct {
		gw     string
		grants []Grant
	}{
		{"", []Grant{{ID: "x", PriorityLevel: LevelCatchAll, Seats: 1}}},
		{"gw", []Grant{{ID: "y", PriorityLevel: LevelCatchAll, Seats: 1}, {PriorityLevel: LevelCatchAll, Seats: 1}}},
	} {
		if _, err := c.Adopt(ctx, bad.gw, bad.grants); !errors.Is(err, ErrInvalid) {
			t.Fatalf("adopt %+v on gateway %q: %v, want ErrInvalid", bad.grants, bad.gw, err)
		}
	}
	if st, _ := c.LevelStats(LevelCatchAll); st.SeatsInUse != 0 {
		t.Fatalf("seats in use %d after invalid adopts, want 0", st.SeatsInUse)
	}
}

// checkHeld fails unless every level's seats in use are the seats of the
// grants c holds on it, and not negative.
func checkHeld(t *testing.T, what string, c *Controller) {
	t.Helper()
	byLevel := map[*level]int{}
	c.mu.Lock()
	for _, h := range c.mu.grants {
		byLevel[h.level] += h.grant.Seats
	}
	c.mu.Unlock()
	for name, l := range c.cur.Load().levels {
		l.mu.Lock()
		inUse := l.mu.seatsInUse
		l.mu.Unlock()
		if inUse < 0 || inUse != byLevel[l] {
			t.Fatalf("%s: level %s has %d seats in use, its grants hold %d", what, name, inUse, byLevel[l])
		}
	}
}
