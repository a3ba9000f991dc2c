package apf

import (
	"context"
	"errors"
	"testing"
)

// TestTryAcquire: a request that finds free seats and nothing queued in
// its level is granted at once; one behind a queued request of its level
// is not (ErrWouldWait, nothing queued or held for it) even with a seat
// free, and the queued one is dispatched first; the wait TryAcquire
// returns queues the request as Acquire would; exempt requests and
// levels without queues are decided without waiting.
func TestTryAcquire(t *testing.T) {
	c := newFixed(t, Config{}, levels{catchAll: 1, globalDefault: 2})
	ctx := t.Context()
	width := func(name string, w uint32) Digest { d := user(name); d.Width = w; return d }

	alice, _, err := c.TryAcquire(ctx, "gw", width("alice", 1))
	if err != nil || alice.ID == "" || alice.Seats != 1 || alice.PriorityLevel != LevelGlobalDefault {
		t.Fatalf("TryAcquire with free seats = %+v, %v; want a grant of 1 seat at %s", alice, err, LevelGlobalDefault)
	}
	// bob needs both seats: he waits in his queue behind alice's.
	bobDone := make(chan error, 1)
	var bob Grant
	go func() {
		var err error
		bob, err = c.Acquire(ctx, "gw", width("bob", 2))
		bobDone <- err
	}()
	waitFor(t, "bob queued", func() bool { return stats(t, c, LevelGlobalDefault).Queued == 1 })

	// One seat is free, but carol must not overtake bob.
	g, carolWait, err := c.TryAcquire(ctx, "gw", width("carol", 1))
	if !errors.Is(err, ErrWouldWait) || carolWait == nil {
		t.Fatalf("TryAcquire behind a queued request = %+v, %v; want ErrWouldWait", g, err)
	}
	if s := stats(t, c, LevelGlobalDefault); s != (Stats{SeatsInUse: 1, Queued: 1}) {
		t.Fatalf("after ErrWouldWait: %+v, want 1 seat in use and bob queued", s)
	}
	if err := c.Release(ctx, alice.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-bobDone; err != nil || bob.Seats != 2 {
		t.Fatalf("bob = %+v, %v; want 2 seats once alice released", bob, err)
	}
	// carol's wait queues her.
	carolDone := make(chan error, 1)
	var carol Grant
	go func() {
		var err error
		carol, err = carolWait(ctx)
		carolDone <- err
	}()
	waitFor(t, "carol queued", func() bool { return stats(t, c, LevelGlobalDefault).Queued == 1 })
	// Both seats are taken, carol queued: dave would wait.
	if _, _, err := c.TryAcquire(ctx, "gw", width("dave", 1)); !errors.Is(err, ErrWouldWait) {
		t.Fatalf("TryAcquire with no free seat: %v, want ErrWouldWait", err)
	}
	if err := c.Release(ctx, bob.ID); err != nil {
		t.Fatal(err)
	}
	if err := <-carolDone; err != nil || carol.Seats != 1 || carol.QueueWait <= 0 {
		t.Fatalf("carol = %+v, %v; want 1 seat once bob released", carol, err)
	}
	if err := c.Release(ctx, carol.ID); err != nil {
		t.Fatal(err)
	}
	if s := stats(t, c, LevelGlobalDefault); s != (Stats{}) {
		t.Fatalf("after releases: %+v, want nothing held or queued", s)
	}

	masters := Digest{User: "admin", Groups: []string{GroupMasters}, Verb: "get", Path: "/api"}
	if g, _, err := c.TryAcquire(ctx, "gw", masters); err != nil || !g.Exempt {
		t.Fatalf("TryAcquire of system:masters = %+v, %v; want an exempt grant", g, err)
	}
	// catch-all has no queues: its second request is rejected at once.
	anon := Digest{User: UserAnonymous, Verb: "get", Path: "/api"}
	first, _, err := c.TryAcquire(ctx, "gw", anon)
	if err != nil || first.PriorityLevel != LevelCatchAll {
		t.Fatalf("TryAcquire at %s = %+v, %v", LevelCatchAll, first, err)
	}
	var rej *RejectedError
	if _, _, err := c.TryAcquire(ctx, "gw", anon); !errors.As(err, &rej) || rej.Reason != ReasonConcurrencyLimit {
		t.Fatalf("TryAcquire at a full %s: %v, want %s", LevelCatchAll, err, ReasonConcurrencyLimit)
	}
	_ = c.Release(context.Background(), first.ID)
}
