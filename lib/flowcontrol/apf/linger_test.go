package apf

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/polltest"
)

// TestWriteChargedForNotifications: a write with final seats (its watch
// notifications) takes max(width, final seats) while it runs and keeps
// them after its Release for its additional latency; a second Release
// fails; the seats come back when the latency has passed. A request
// without them gives its seat back at its Release.
func TestWriteChargedForNotifications(t *testing.T) {
	ctx := context.Background()
	c := newFixed(t, Config{BorrowingPeriod: -1}, levels{catchAll: 20})
	create := Digest{User: UserAnonymous, Verb: "create", Resource: "configmaps", Namespace: "ns", IsResourceRequest: true}

	plain, err := c.Acquire(ctx, "gw", create)
	if err != nil {
		t.Fatal(err)
	}
	if plain.Seats != 1 {
		t.Fatalf("a write without watchers holds %d seats, want 1", plain.Seats)
	}
	if err := c.Release(ctx, plain.ID); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.LevelStats(LevelCatchAll); st.SeatsInUse != 0 {
		t.Fatalf("after its release, %d seats in use, want 0", st.SeatsInUse)
	}

	for _, linger := range []time.Duration{time.Hour, 50 * time.Millisecond} {
		w := create
		w.Width, w.FinalSeats, w.AdditionalLatency = 1, 10, linger
		g, err := c.Acquire(ctx, "gw", w)
		if err != nil {
			t.Fatal(err)
		}
		if g.Seats != 10 {
			t.Fatalf("a write with 10 final seats holds %d seats, want 10", g.Seats)
		}
		if err := c.Release(ctx, g.ID); err != nil {
			t.Fatal(err)
		}
		if err := c.Release(ctx, g.ID); !errors.Is(err, ErrUnknownGrant) {
			t.Fatalf("second release: %v, want ErrUnknownGrant", err)
		}
		if linger == time.Hour {
			// Well within its hour: the notifications still take the seats.
			if st, _ := c.LevelStats(LevelCatchAll); st.SeatsInUse != 10 {
				t.Fatalf("right after the release of a write lingering %s, %d seats in use, want 10", linger, st.SeatsInUse)
			}
			continue
		}
		polltest.Until(t, 10*time.Second, "the lingering seats back", func() bool {
			st, _ := c.LevelStats(LevelCatchAll)
			return st.SeatsInUse == 10 // the hour-long one only
		})
	}
}
