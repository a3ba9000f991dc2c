package apf

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-cp/meridian/lib/polltest"
	"github.com/meridian-cp/meridian/lib/telemetry/telemetrytest"
)

func newController(t *testing.T, cfg Config) *Controller {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func user(name string) Digest {
	return Digest{User: name, Groups: []string{GroupAuthenticated}, Verb: "list", Resource: "configmaps", Namespace: "default", IsResourceRequest: true}
}

// waitFor polls cond for up to 5s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	polltest.Until(t, 5*time.Second, what, cond)
}

func stats(t *testing.T, c *Controller, level string) Stats {
	t.Helper()
	s, ok := c.LevelStats(level)
	if !ok {
		t.Fatalf("no level %s", level)
	}
	return s
}

func TestClassification(t *testing.T) {
	c := newFixed(t, Config{}, levels{})
	tests := []struct {
		name       string
		d          Digest
		schema, pl string
		exempt     bool
	}{
		{"masters", Digest{User: "admin", Groups: []string{GroupMasters, GroupAuthenticated}, Verb: "delete", Resource: "secrets", Namespace: "x", IsResourceRequest: true}, SchemaExempt, LevelExempt, true},
		{"probe by anonymous", Digest{User: UserAnonymous, Verb: "get", Path: "/readyz"}, SchemaProbes, LevelExempt, true},
		{"probe by user", Digest{User: "bob", Verb: "get", Path: "/livez"}, SchemaProbes, LevelExempt, true},
		{"probe subpath is not a probe", Digest{User: "bob", Verb: "get", Path: "/healthz/etcd"}, SchemaGlobalDefault, LevelGlobalDefault, false},
		{"authenticated", user("alice"), SchemaGlobalDefault, LevelGlobalDefault, false},
		{"named user without groups", Digest{User: "carol", Verb: "get", Path: "/api"}, SchemaGlobalDefault, LevelGlobalDefault, false},
		{"cluster-scoped", Digest{User: "carol", Groups: []string{GroupAuthenticated}, Verb: "get", Resource: "namespaces", IsResourceRequest: true}, SchemaGlobalDefault, LevelGlobalDefault, false},
		{"anonymous", Digest{User: UserAnonymous, Groups: []string{GroupUnauthenticated}, Verb: "get", Path: "/version"}, SchemaCatchAll, LevelCatchAll, false},
		{"no user", Digest{Verb: "get", Resource: "pods", Namespace: "a", IsResourceRequest: true}, SchemaCatchAll, LevelCatchAll, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := c.Acquire(t.Context(), "gw", tc.d)
			if err != nil {
				t.Fatal(err)
			}
			if !g.Exempt {
				defer c.Release(t.Context(), g.ID)
			}
			if g.FlowSchema != tc.schema || g.PriorityLevel != tc.pl || g.Exempt != tc.exempt {
				t.Fatalf("got %s/%s exempt=%v, want %s/%s exempt=%v", g.FlowSchema, g.PriorityLevel, g.Exempt, tc.schema, tc.pl, tc.exempt)
			}
			if g.FlowSchemaUID != ObjectUID("flowschemas", tc.schema) || g.PriorityLevelUID != ObjectUID("prioritylevelconfigurations", tc.pl) {
				t.Fatalf("UIDs %s %s not the stable ones", g.FlowSchemaUID, g.PriorityLevelUID)
			}
			if (g.ID == "") != tc.exempt || (tc.exempt && g.Seats != 0) || (!tc.exempt && g.Seats != 1) {
				t.Fatalf("grant %+v", g)
			}
		})
	}
	if a, b := ObjectUID("flowschemas", "exempt"), ObjectUID("prioritylevelconfigurations", "exempt"); a == b || len(a) != 36 || a[14] != '5' {
		t.Fatalf("UIDs %s and %s: want distinct version 5 UUIDs", a, b)
	}
}

func TestExemptNeverBlocks(t *testing.T) {
	c := newFixed(t, Config{}, levels{catchAll: 1, globalDefault: 1, queues: 1, handSize: 1, queueLength: 1})
	// Fill both limited levels and global-default's only queue.
	if _, err := c.Acquire(t.Context(), "gw", user("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(t.Context(), "gw", Digest{Verb: "get", Path: "/"}); err != nil {
		t.Fatal(err)
	}
	go c.Acquire(t.Context(), "gw", user("b"))
	waitFor(t, "a queued request", func() bool { return stats(t, c, LevelGlobalDefault).Queued == 1 })

	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	for i := 0; i < 100; i++ {
		for _, d := range []Digest{
			{User: "root", Groups: []string{GroupMasters}, Verb: "list", Resource: "pods", IsResourceRequest: true, Width: 50},
			{User: UserAnonymous, Verb: "get", Path: "/healthz"},
		} {
			g, err := c.Acquire(ctx, "gw", d)
			if err != nil {
				t.Fatalf("exempt request blocked or failed: %v", err)
			}
			if !g.Exempt || g.Seats != 0 || g.QueueWait != 0 || g.ID != "" {
				t.Fatalf("grant %+v", g)
			}
		}
	}
	// Exempt grants hold nothing, so the table keeps only the two limited
	// grants above (and the queued request's, once dispatched).
	c.mu.Lock()
	n := len(c.mu.grants)
	c.mu.Unlock()
	if n > 3 {
		t.Fatalf("%d grants held after 200 exempt requests", n)
	}
}

func TestConcurrencyLimitHolds(t *testing.T) {
	const limit = 5
	c := newFixed(t, Config{}, levels{globalDefault: limit})
	var running, peak atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g, err := c.Acquire(t.Context(), "gw", user(fmt.Sprintf("u%d", i%7)))
			if err != nil {
				errs <- err
				return
			}
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(2 * time.Millisecond)
			running.Add(-1)
			if err := c.Release(t.Context(), g.ID); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if p := peak.Load(); p > limit || p < 2 {
		t.Fatalf("peak concurrency %d, want 2..%d", p, limit)
	}
	if s := stats(t, c, LevelGlobalDefault); s.SeatsInUse != 0 || s.Queued != 0 {
		t.Fatalf("after all released: %+v", s)
	}
}

func TestWideRequests(t *testing.T) {
	c := newFixed(t, Config{}, levels{globalDefault: 4})
	d := user("a")
	d.Width = 10
	g, err := c.Acquire(t.Context(), "gw", d)
	if err != nil {
		t.Fatal(err)
	}
	if g.Seats != 4 {
		t.Fatalf("width 10 on a 4-seat level got %d seats, want 4", g.Seats)
	}
	// A one-seat request waits for the wide one.
	done := make(chan Grant)
	go func() {
		g, _ := c.Acquire(t.Context(), "gw", user("b"))
		done <- g
	}()
	waitFor(t, "a queued request", func() bool { return stats(t, c, LevelGlobalDefault).Queued == 1 })
	c.Release(t.Context(), g.ID)
	if g := <-done; g.Seats != 1 {
		t.Fatalf("width 0 got %d seats, want 1", g.Seats)
	}
}

func TestQueueFull(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := newFixed(t, Config{Registerer: reg}, levels{globalDefault: 1, queues: 1, handSize: 1, queueLength: 2})
	if _, err := c.Acquire(t.Context(), "gw", user("a")); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		go c.Acquire(t.Context(), "gw", user("a"))
	}
	waitFor(t, "full queue", func() bool { return stats(t, c, LevelGlobalDefault).Queued == 2 })
	_, err := c.Acquire(t.Context(), "gw", user("b"))
	var rej *RejectedError
	if !errors.As(err, &rej) || rej.Reason != ReasonQueueFull || !errors.Is(err, ErrRejected) {
		t.Fatalf("err = %v, want queue-full rejection", err)
	}
	got := telemetrytest.Sum(t, reg, "apiserver_flowcontrol_rejected_requests_total", map[string]string{"reason": ReasonQueueFull})
	if got != 1 {
		t.Fatalf("rejected_requests_total{queue-full} = %v", got)
	}
}

func TestCatchAllRejectsWhenFull(t *testing.T) {
	c := newFixed(t, Config{}, levels{catchAll: 2})
	anon := Digest{Verb: "get", Path: "/api"}
	for i := 0; i < 2; i++ {
		if _, err := c.Acquire(t.Context(), "gw", anon); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.Acquire(t.Context(), "gw", anon)
	var rej *RejectedError
	if !errors.As(err, &rej) || rej.Reason != ReasonConcurrencyLimit || rej.PriorityLevel != LevelCatchAll {
		t.Fatalf("err = %v, want concurrency-limit rejection by catch-all", err)
	}
}

func TestMaxWait(t *testing.T) {
	c := newFixed(t, Config{MaxWait: 50 * time.Millisecond}, levels{globalDefault: 1})
	if _, err := c.Acquire(t.Context(), "gw", user("a")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := c.Acquire(t.Context(), "gw", user("b"))
	var rej *RejectedError
	if !errors.As(err, &rej) || rej.Reason != ReasonTimeout {
		t.Fatalf("err = %v, want time-out rejection", err)
	}
	if d := time.Since(start); d < 50*time.Millisecond || d > 2*time.Second {
		t.Fatalf("rejected after %s", d)
	}
	if s := stats(t, c, LevelGlobalDefault); s.Queued != 0 {
		t.Fatalf("timed-out request still queued: %+v", s)
	}
}

func TestCancelRemovesFromQueue(t *testing.T) {
	c := newFixed(t, Config{}, levels{globalDefault: 1})
	held, err := c.Acquire(t.Context(), "gw", user("a"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error)
	go func() {
		_, err := c.Acquire(ctx, "gw", user("b"))
		errc <- err
	}()
	waitFor(t, "a queued request", func() bool { return stats(t, c, LevelGlobalDefault).Queued == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if s := stats(t, c, LevelGlobalDefault); s.Queued != 0 || s.SeatsInUse != 1 {
		t.Fatalf("after cancel: %+v", s)
	}
	if err := c.Release(t.Context(), held.ID); err != nil {
		t.Fatal(err)
	}
	if s := stats(t, c, LevelGlobalDefault); s.SeatsInUse != 0 {
		t.Fatalf("cancelled request was dispatched: %+v", s)
	}
	if err := c.Release(t.Context(), held.ID); !errors.Is(err, ErrUnknownGrant) {
		t.Fatalf("second release: %v, want ErrUnknownGrant", err)
	}
}

func TestGatewayExpiry(t *testing.T) {
	c := newFixed(t, Config{Lease: 150 * time.Millisecond, SweepInterval: 10 * time.Millisecond}, levels{globalDefault: 3})
	var dead []Grant
	for i := 0; i < 2; i++ {
		g, err := c.Acquire(t.Context(), "dead-gw", user("a"))
		if err != nil {
			t.Fatal(err)
		}
		dead = append(dead, g)
	}
	alive, err := c.Acquire(t.Context(), "live-gw", user("b"))
	if err != nil {
		t.Fatal(err)
	}
	// A waiter that can only run once the dead gateway's seats are freed.
	got := make(chan error)
	go func() {
		_, err := c.Acquire(t.Context(), "live-gw", user("c"))
		got <- err
	}()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				c.Heartbeat(t.Context(), "live-gw")
			}
		}
	}()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "expiry", func() bool { return stats(t, c, LevelGlobalDefault).SeatsInUse == 2 })
	for _, g := range dead {
		if err := c.Release(t.Context(), g.ID); !errors.Is(err, ErrUnknownGrant) {
			t.Fatalf("release of expired grant: %v", err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	if err := c.Release(t.Context(), alive.ID); err != nil {
		t.Fatalf("grant of a live gateway expired: %v", err)
	}
	if d, _ := c.Heartbeat(t.Context(), "live-gw"); d != 75*time.Millisecond {
		t.Fatalf("heartbeat interval %s", d)
	}
}

func TestCloseFailsWaiters(t *testing.T) {
	c, err := New(Config{})
	if err == nil {
		err = c.Apply(fixedConfig(levels{globalDefault: 1}))
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(t.Context(), "gw", user("a")); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error)
	go func() {
		_, err := c.Acquire(t.Context(), "gw", user("b"))
		errc <- err
	}()
	waitFor(t, "a queued request", func() bool { return stats(t, c, LevelGlobalDefault).Queued == 1 })
	c.Close()
	c.Close()
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("waiter got %v, want ErrClosed", err)
	}
	if _, err := c.Acquire(t.Context(), "gw", user("c")); !errors.Is(err, ErrClosed) {
		t.Fatalf("acquire after close: %v", err)
	}
}

func TestInvalid(t *testing.T) {
	c := newController(t, Config{})
	if _, err := c.Acquire(t.Context(), "", user("a")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty gateway: %v", err)
	}
	if err := c.Release(t.Context(), ""); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty grant: %v", err)
	}
	if err := (Config{ServerConcurrencyLimit: -1, MaxWait: -1}).Validate(); err == nil {
		t.Fatal("bad config accepted")
	}
}

func TestDealer(t *testing.T) {
	d, err := newDealer(128, 6)
	if err != nil {
		t.Fatal(err)
	}
	for h := uint64(0); h < 5000; h++ {
		seen := map[int]bool{}
		d.deal(h*0x9e3779b97f4a7c15, func(card int) {
			if card < 0 || card >= 128 || seen[card] {
				t.Fatalf("hash %d: bad or repeated card %d", h, card)
			}
			seen[card] = true
		})
		if len(seen) != 6 {
			t.Fatalf("hand of %d cards", len(seen))
		}
	}
	if _, err := newDealer(4, 5); err == nil {
		t.Fatal("hand larger than deck accepted")
	}
}
