package watchmux

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"

	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
)

// TestDeliveryWhileParkingLosesNothing: messages and then a failure
// arrive (as the stream's receiver delivers them) while the reader
// alternates between parking and waiting in Recv; the reader gets every
// message pushed before the failure was seen, in order, then the failure,
// and is never left asleep with something to read.
func TestDeliveryWhileParkingLosesNothing(t *testing.T) {
	r := &manyReplica{cancels: make(chan int64, 64)}
	m := New(serveMany(t, r), Options{})
	for round := range 50 {
		w := openWatch(t, m)
		const n = 200
		go func() {
			for i := range n {
				msg := &watchv1.WatchManyResponse{Id: w.id, Response: &watchv1.WatchResponse{Frames: []byte(strconv.Itoa(i))}}
				if !w.push(msg) {
					break
				}
				if i%7 == 0 || i == n-1 {
					// Now and then (and before the failure) the reader
					// drains the queue, to park or wait on an empty one.
					drained(w)
				}
			}
			w.fail(ErrTooSlow)
		}()
		next := 0
		for i := 0; ; i++ {
			if i%2 == 0 {
				woken := make(chan struct{})
				if w.Park(func() { close(woken) }) {
					<-woken // a lost wake-up hangs here (the test's timeout)
				}
			}
			resp, err := w.Recv()
			if err != nil {
				if err != ErrTooSlow {
					t.Fatalf("round %d: Recv: %v, want ErrTooSlow", round, err)
				}
				break
			}
			if got, want := string(resp.GetFrames()), fmt.Sprint(next); got != want {
				t.Fatalf("round %d: message %q, want %q", round, got, want)
			}
			next++
		}
		if next > n {
			t.Fatalf("round %d: %d messages, pushed at most %d", round, next, n)
		}
	}
}

// TestCloseRacesDelivery: Close while the receiver delivers more than
// the window (so it cuts the watch off as too slow) races with neither,
// and leaves nothing registered on the session.
func TestCloseRacesDelivery(t *testing.T) {
	r := &manyReplica{cancels: make(chan int64, 1024)}
	m := New(serveMany(t, r), Options{Buffer: 4})
	for range 100 {
		w := openWatch(t, m)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := range 20 {
				w.s.deliver(w.id, &watchv1.WatchManyResponse{Id: w.id, Response: &watchv1.WatchResponse{Frames: []byte{byte(i)}}})
			}
		}()
		_, _ = w.Recv()
		w.Close()
		<-done
		if _, err := w.Recv(); err == nil {
			t.Fatal("Recv after Close returned a message")
		}
		w.s.mu.Lock()
		_, left := w.s.watches[w.id]
		w.s.mu.Unlock()
		if left {
			t.Fatal("a closed watch is still registered on its session")
		}
	}
}

// drained returns once w's queue is empty.
func drained(w *watchStream) {
	for {
		w.qmu.Lock()
		empty := w.head == len(w.queued)
		w.qmu.Unlock()
		if empty {
			return
		}
		runtime.Gosched()
	}
}
