package server

import (
	"container/heap"
	"sync"
	"time"
)

// deadlines stops watches when their timeout runs out, with one timer for
// all of them: a watch costs its place in a heap, not a timer and a
// closure of its own for as long as it lives (a relist storm holds
// thousands of watches at once).
//
// The timer fires at the earliest deadline; whoever adds an earlier one
// moves it. Stopped watches are stopped outside the lock (stop pokes the
// watch's mux).
type deadlines struct {
	mu    sync.Mutex
	h     deadlineHeap
	timer *time.Timer // armed for h[0]; nil before the first add
	at    time.Time   // when timer fires; zero when not armed
}

// add schedules w.stop(stopTimeout) at w.deadline.
func (d *deadlines) add(w *watch) {
	d.mu.Lock()
	defer d.mu.Unlock()
	heap.Push(&d.h, w)
	d.armLocked()
}

// remove unschedules w; it does nothing when w is not scheduled.
func (d *deadlines) remove(w *watch) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if w.dl >= 0 {
		heap.Remove(&d.h, w.dl)
	}
}

// armLocked sets the timer for the earliest deadline, unless it is set
// for that or an earlier time already (an early firing finds nothing due
// and re-arms).
func (d *deadlines) armLocked() {
	if len(d.h) == 0 {
		return
	}
	next := d.h[0].deadline
	if !d.at.IsZero() && !d.at.After(next) {
		return
	}
	d.at = next
	if d.timer == nil {
		d.timer = time.AfterFunc(time.Until(next), d.fire)
		return
	}
	d.timer.Reset(time.Until(next))
}

// fire stops every watch whose deadline has passed and re-arms the timer.
func (d *deadlines) fire() {
	var due []*watch
	d.mu.Lock()
	now := time.Now()
	for len(d.h) > 0 && !d.h[0].deadline.After(now) {
		due = append(due, heap.Pop(&d.h).(*watch))
	}
	d.at = time.Time{}
	d.armLocked()
	d.mu.Unlock()
	for _, w := range due {
		w.stop(stopTimeout)
	}
}

// deadlineHeap orders watches by deadline, keeping each one's index in
// watch.dl (container/heap).
type deadlineHeap []*watch

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }
func (h deadlineHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].dl, h[j].dl = i, j
}

func (h *deadlineHeap) Push(x any) {
	w := x.(*watch)
	w.dl = len(*h)
	*h = append(*h, w)
}

func (h *deadlineHeap) Pop() any {
	old := *h
	n := len(old)
	w := old[n-1]
	old[n-1] = nil
	w.dl = -1
	*h = old[:n-1]
	if cap(*h) > 1024 && n-1 < cap(*h)/4 {
		// Let a storm's worth of slots go once it is over.
		*h = append(deadlineHeap(nil), *h...)
	}
	return w
}
