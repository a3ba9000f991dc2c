package apf

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestSeatsNeverLeakedAcrossLeaderChange: three replicas, one leading at
// a time; gateways acquire from the leader and release to whoever leads
// when their request ends (as flowcontrolclient does), and the leader
// changes at random, the old one forgetting what it held (Forget, as the
// service does when a term ends). After every step each replica's seats
// in use are what the grants it holds add up to, never negative and
// never above the level's seats; at the end, with every request
// finished, no replica holds a seat.
func TestSeatsNeverLeakedAcrossLeaderChange(t *testing.T) {
	const seats = 6
	ctx := context.Background()
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 11))
		var replicas []*Controller
		for range 3 {
			replicas = append(replicas, newFixed(t, Config{BorrowingPeriod: -1}, levels{catchAll: seats}))
		}
		leader := replicas[0]
		// running are the grants of the gateways' running requests.
		var running []string
		gateways := []string{"gw-a", "gw-b"}
		for step := range 1000 {
			switch op := rng.IntN(10); {
			case op < 5:
				// An anonymous request: catch-all, which rejects when full.
				d := Digest{User: UserAnonymous, Verb: "get", Resource: "pods", IsResourceRequest: true, Width: uint32(rng.IntN(4))}
				g, err := leader.Acquire(ctx, gateways[rng.IntN(len(gateways))], d)
				switch {
				case err == nil:
					running = append(running, g.ID)
				case !errors.Is(err, ErrRejected):
					t.Fatalf("seed %d step %d: %v", seed, step, err)
				}
			case op < 9 && len(running) > 0:
				i := rng.IntN(len(running))
				err := leader.Release(ctx, running[i])
				if err != nil && !errors.Is(err, ErrUnknownGrant) {
					t.Fatalf("seed %d step %d: %v", seed, step, err)
				}
				running = append(running[:i], running[i+1:]...)
			case op == 9:
				leader.Forget()
				leader = replicas[rng.IntN(len(replicas))]
			}
			for i, r := range replicas {
				checkHeld(t, fmt.Sprintf("seed %d step %d replica %d", seed, step, i), r, seats)
			}
		}
		for _, id := range running {
			_ = leader.Release(ctx, id)
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
}

// checkHeld fails unless every level's seats in use are the seats of the
// grants c holds on it, between 0 and max.
func checkHeld(t *testing.T, what string, c *Controller, max int) {
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
		if inUse < 0 || inUse > max || inUse != byLevel[l] {
			t.Fatalf("%s: level %s has %d seats in use, its grants hold %d (at most %d)", what, name, inUse, byLevel[l], max)
		}
	}
}
