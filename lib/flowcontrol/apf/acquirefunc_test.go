package apf

import (
	"context"
	"errors"
	"testing"
	"time"
)

// outcome is what an AcquireFunc's done received.
type outcome struct {
	g   Grant
	err error
}

// acquireFunc calls c.AcquireFunc with a done that sends its outcome on
// the returned channel, and fails the test if done is called twice.
func acquireFunc(t *testing.T, ctx context.Context, c *Controller, d Digest) (Grant, bool, error, <-chan outcome) {
	t.Helper()
	ch := make(chan outcome, 2)
	g, q, err := c.AcquireFunc(ctx, "gw", d, func(g Grant, err error) { ch <- outcome{g, err} })
	return g, !q.Waiting(), err, ch
}

// doneNow returns the outcome already sent on ch, failing the test if
// there is none: done ran in the goroutine that decided the request.
func doneNow(t *testing.T, what string, ch <-chan outcome) outcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	default:
		t.Fatalf("%s: done was not called by the goroutine that decided the request", what)
		return outcome{}
	}
}

// TestAcquireFunc: a request with free seats is granted at once; one
// that must wait is queued, and its done gets the grant from the Release
// that dispatched it, before that Release returns; a queued request
// leaves its queue when its context ends, when it waits past MaxWait
// and when the Controller closes, each with Acquire's error and done
// called once; exempt requests and levels without queues are decided at
// once; no seat is left held.
func TestAcquireFunc(t *testing.T) {
	c := newFixed(t, Config{MaxWait: time.Minute}, levels{catchAll: 1, globalDefault: 2})
	ctx := t.Context()
	width := func(name string, w uint32) Digest { d := user(name); d.Width = w; return d }

	alice, decided, err, _ := acquireFunc(t, ctx, c, width("alice", 2))
	if !decided || err != nil || alice.ID == "" || alice.Seats != 2 || alice.PriorityLevel != LevelGlobalDefault {
		t.Fatalf("AcquireFunc with free seats = %+v, %v, %v; want a grant of 2 seats at once", alice, decided, err)
	}
	// Both seats are taken: bob waits in his queue.
	g, decided, err, bobDone := acquireFunc(t, ctx, c, width("bob", 1))
	if decided || err != nil || g.ID != "" {
		t.Fatalf("AcquireFunc without a free seat = %+v, %v, %v; want it queued", g, decided, err)
	}
	if s := stats(t, c, LevelGlobalDefault); s != (Stats{SeatsInUse: 2, Queued: 1}) {
		t.Fatalf("bob queued: %+v", s)
	}
	if err := c.Release(ctx, alice.ID); err != nil {
		t.Fatal(err)
	}
	bob := doneNow(t, "bob after alice's release", bobDone)
	if bob.err != nil || bob.g.ID == "" || bob.g.Seats != 1 || bob.g.QueueWait <= 0 {
		t.Fatalf("bob = %+v, %v; want 1 seat after a wait", bob.g, bob.err)
	}

	// carol waits for the second seat's taker, then gives up.
	dave, _, _, _ := acquireFunc(t, ctx, c, width("dave", 1))
	cctx, cancel := context.WithCancel(ctx)
	_, decided, _, carolDone := acquireFunc(t, cctx, c, width("carol", 1))
	if decided {
		t.Fatal("carol was decided with no seat free")
	}
	cancel()
	if o := <-carolDone; !errors.Is(o.err, context.Canceled) {
		t.Fatalf("carol cancelled: %+v, want context.Canceled", o)
	}
	if s := stats(t, c, LevelGlobalDefault); s != (Stats{SeatsInUse: 2}) {
		t.Fatalf("after carol left: %+v, want 2 seats in use and nothing queued", s)
	}

	// erin waits past MaxWait.
	short := newFixed(t, Config{MaxWait: 20 * time.Millisecond}, levels{globalDefault: 1})
	first, _, _, _ := acquireFunc(t, ctx, short, width("first", 1))
	_, _, _, erinDone := acquireFunc(t, ctx, short, width("erin", 1))
	var rej *RejectedError
	if o := <-erinDone; !errors.As(o.err, &rej) || rej.Reason != ReasonTimeout || rej.PriorityLevelUID == "" {
		t.Fatalf("erin past MaxWait: %+v, want %s with the level's UID", o, ReasonTimeout)
	}
	if err := short.Release(ctx, first.ID); err != nil {
		t.Fatal(err)
	}

	// frank is queued when the Controller closes.
	_, _, _, frankDone := acquireFunc(t, ctx, c, width("frank", 1))
	masters := Digest{User: "admin", Groups: []string{GroupMasters}, Verb: "get", Path: "/api"}
	if g, decided, err, _ := acquireFunc(t, ctx, c, masters); !decided || err != nil || !g.Exempt {
		t.Fatalf("AcquireFunc of system:masters = %+v, %v, %v; want an exempt grant at once", g, decided, err)
	}
	// catch-all has no queues: its second request is rejected at once.
	anon := Digest{User: UserAnonymous, Verb: "get", Path: "/api"}
	one, decided, err, _ := acquireFunc(t, ctx, c, anon)
	if !decided || err != nil || one.PriorityLevel != LevelCatchAll {
		t.Fatalf("AcquireFunc at %s = %+v, %v, %v", LevelCatchAll, one, decided, err)
	}
	if _, decided, err, _ := acquireFunc(t, ctx, c, anon); !decided || !errors.As(err, &rej) || rej.Reason != ReasonConcurrencyLimit {
		t.Fatalf("AcquireFunc at a full %s: %v, %v; want %s at once", LevelCatchAll, decided, err, ReasonConcurrencyLimit)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if o := doneNow(t, "frank after Close", frankDone); !errors.Is(o.err, ErrClosed) {
		t.Fatalf("frank at Close: %+v, want ErrClosed", o)
	}
	if _, decided, err, _ := acquireFunc(t, ctx, c, width("gina", 1)); !decided || !errors.Is(err, ErrClosed) {
		t.Fatalf("AcquireFunc after Close: %v, %v; want ErrClosed at once", decided, err)
	}
	for _, id := range []string{bob.g.ID, dave.ID, one.ID} {
		if err := c.Release(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{LevelGlobalDefault, LevelCatchAll} {
		if s := stats(t, c, name); s != (Stats{}) {
			t.Fatalf("%s at the end: %+v, want nothing held or queued", name, s)
		}
	}
	for _, ch := range []<-chan outcome{bobDone, carolDone, erinDone, frankDone} {
		select {
		case o := <-ch:
			t.Fatalf("done called twice: %+v", o)
		default:
		}
	}
}

// TestAcquireFuncCancelAndDeadlines: a request queued with a context
// that never ends leaves its queue by Queued.Cancel (done gets
// context.Canceled, once; a second Cancel, or one after the request was
// decided, does nothing); requests queued together, and one queued after
// the level's deadline timer has fired and found nothing left, each
// leave their queue past MaxWait (time-out), done called once; no seat
// or queued request is left.
func TestAcquireFuncCancelAndDeadlines(t *testing.T) {
	c := newFixed(t, Config{MaxWait: 20 * time.Millisecond}, levels{globalDefault: 1})
	ctx := context.WithoutCancel(t.Context()) // never done
	queue := func(name string) (Queued, <-chan outcome) {
		t.Helper()
		ch := make(chan outcome, 2)
		_, q, err := c.AcquireFunc(ctx, "gw", user(name), func(g Grant, err error) { ch <- outcome{g, err} })
		if err != nil || !q.Waiting() {
			t.Fatalf("AcquireFunc of %s with no seat free = %+v, %v; want it queued", name, q, err)
		}
		return q, ch
	}
	once := func(what string, ch <-chan outcome) outcome {
		t.Helper()
		var o outcome
		select {
		case o = <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: done was never called", what)
		}
		select {
		case again := <-ch:
			t.Fatalf("%s: done called twice: %+v", what, again)
		default:
		}
		return o
	}
	timedOut := func(what string, ch <-chan outcome) {
		t.Helper()
		var rej *RejectedError
		if o := once(what, ch); !errors.As(o.err, &rej) || rej.Reason != ReasonTimeout {
			t.Fatalf("%s past MaxWait: %+v, want %s", what, o, ReasonTimeout)
		}
	}

	holder, _, err := c.AcquireFunc(ctx, "gw", user("holder"), func(Grant, error) { t.Error("holder was queued") })
	if err != nil || holder.ID == "" {
		t.Fatalf("first AcquireFunc = %+v, %v; want the seat", holder, err)
	}
	alice, aliceDone := queue("alice")
	alice.Cancel()
	if o := doneNow(t, "alice cancelled", aliceDone); !errors.Is(o.err, context.Canceled) {
		t.Fatalf("alice cancelled: %+v, want context.Canceled", o)
	}
	alice.Cancel()
	Queued{}.Cancel()
	select {
	case o := <-aliceDone:
		t.Fatalf("alice cancelled twice: done called again with %+v", o)
	default:
	}

	// bob and carol queued together; then, with nothing queued, dave.
	_, bobDone := queue("bob")
	carol, carolDone := queue("carol")
	timedOut("bob", bobDone)
	timedOut("carol", carolDone)
	carol.Cancel() // decided: nothing happens
	if s := stats(t, c, LevelGlobalDefault); s != (Stats{SeatsInUse: 1}) {
		t.Fatalf("after the time-outs: %+v, want the holder's seat only", s)
	}
	_, daveDone := queue("dave")
	timedOut("dave", daveDone)

	if err := c.Release(ctx, holder.ID); err != nil {
		t.Fatal(err)
	}
	if s := stats(t, c, LevelGlobalDefault); s != (Stats{}) {
		t.Fatalf("at the end: %+v, want nothing held or queued", s)
	}
}
