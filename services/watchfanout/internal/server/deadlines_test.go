package server

import (
	"testing"
	"time"
)

// TestDeadlines: watches are stopped with stopTimeout once their deadline
// passes, in any order of adding, and a removed watch never is.
func TestDeadlines(t *testing.T) {
	var d deadlines
	now := time.Now()
	mk := func(after time.Duration) *watch {
		w := &watch{deadline: now.Add(after), dl: -1}
		w.sched.Store(true) // nothing to schedule: stop only marks it
		return w
	}
	late, early, removed, mid := mk(300*time.Millisecond), mk(50*time.Millisecond), mk(100*time.Millisecond), mk(150*time.Millisecond)
	for _, w := range []*watch{late, removed, early, mid} {
		d.add(w)
	}
	d.remove(removed)
	d.remove(removed) // twice is fine
	if removed.dl != -1 {
		t.Fatalf("removed watch still at %d", removed.dl)
	}
	waitStopped := func(w *watch, name string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); w.stopped.Load() == 0; {
			if time.Now().After(deadline) {
				t.Fatalf("%s not stopped", name)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if got := w.stopped.Load(); got != stopTimeout {
			t.Fatalf("%s stopped with %d", name, got)
		}
		if time.Now().Before(w.deadline) {
			t.Fatalf("%s stopped before its deadline", name)
		}
	}
	waitStopped(early, "early")
	if late.stopped.Load() != 0 {
		t.Fatal("late stopped with early")
	}
	waitStopped(mid, "mid")
	waitStopped(late, "late")
	time.Sleep(50 * time.Millisecond)
	if removed.stopped.Load() != 0 {
		t.Fatal("a removed watch was stopped")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.h) != 0 {
		t.Fatalf("%d watches left", len(d.h))
	}
}

// TestDeadlinesEarlierMovesTimer: a deadline earlier than the armed one
// fires on time.
func TestDeadlinesEarlierMovesTimer(t *testing.T) {
	var d deadlines
	slow := &watch{deadline: time.Now().Add(time.Hour), dl: -1}
	slow.sched.Store(true)
	d.add(slow)
	defer d.remove(slow)
	fast := &watch{deadline: time.Now().Add(20 * time.Millisecond), dl: -1}
	fast.sched.Store(true)
	d.add(fast)
	for deadline := time.Now().Add(5 * time.Second); fast.stopped.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the earlier deadline did not fire")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDeadlineHeap: whatever is added and removed, the heap is ordered
// by deadline and every scheduled watch knows its place (dl), which
// remove relies on; an unscheduled one is at -1.
func TestDeadlineHeap(t *testing.T) {
	var d deadlines
	base := time.Now().Add(time.Hour) // nothing fires
	var ws []*watch
	for i := range 200 {
		w := &watch{deadline: base.Add(time.Duration((i*7919)%200) * time.Second), dl: -1}
		ws = append(ws, w)
		d.add(w)
	}
	for i, w := range ws {
		if i%3 == 0 {
			d.remove(w)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		defer d.timer.Stop()
	}
	for i, w := range d.h {
		if w.dl != i {
			t.Fatalf("watch at %d thinks it is at %d", i, w.dl)
		}
		if p := (i - 1) / 2; i > 0 && d.h[p].deadline.After(w.deadline) {
			t.Fatalf("the heap is out of order at %d", i)
		}
	}
	for i, w := range ws {
		if removed := i%3 == 0; removed != (w.dl == -1) {
			t.Fatalf("watch %d: removed %t, place %d", i, removed, w.dl)
		}
	}
	if want := 200 - 67; len(d.h) != want {
		t.Fatalf("%d scheduled, want %d", len(d.h), want)
	}
}
