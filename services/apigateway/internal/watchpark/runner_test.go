package watchpark

import (
	"bytes"
	"runtime"
	"testing"
	"time"
)

// goid is the calling goroutine's id, from its stack's header.
func goid() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	f := bytes.Fields(buf)
	if len(f) < 2 {
		return ""
	}
	return string(f[1])
}

// resumeOnce parks a watch of its own on rn, wakes it, and returns the
// goroutine its resumption ran on.
func resumeOnce(t *testing.T, rn *Runner) string {
	t.Helper()
	h := New(rn)
	ran := make(chan string, 1)
	var wake func()
	if !h.Park(parkerFunc(func(w func()) bool { wake = w; return true }), func() {
		ran <- goid()
		h.End(nil)
	}) {
		t.Fatal("did not park")
	}
	ended := make(chan struct{})
	h.Returned(func(bool) { close(ended) })
	wake()
	id := <-ran
	<-ended
	return id
}

// TestRunnerKeepsGoroutines: the resumptions of watches woken one after
// another run on one goroutine of the Runner's, not a new one each.
func TestRunnerKeepsGoroutines(t *testing.T) {
	rn := NewRunner(nil, time.Hour)
	first := resumeOnce(t, rn)
	for range 5 {
		// The goroutine goes back to waiting after the watch's end;
		// wait until it has.
		waitFor(t, func() bool { rn.mu.Lock(); defer rn.mu.Unlock(); return len(rn.waiting) == 1 })
		if id := resumeOnce(t, rn); id != first {
			t.Fatalf("a resumption ran on goroutine %s, the first on %s: want the same", id, first)
		}
	}
}

// TestRunnerIdleReturns: a Runner's goroutines return once idle, and the
// Runner keeps none.
func TestRunnerIdleReturns(t *testing.T) {
	rn := NewRunner(nil, time.Millisecond)
	for range 3 {
		resumeOnce(t, rn)
	}
	waitFor(t, func() bool { rn.mu.Lock(); defer rn.mu.Unlock(); return len(rn.waiting) == 0 && !rn.reaping })
	// And it starts goroutines again after.
	resumeOnce(t, rn)
}

// waitFor polls cond until it holds, failing the test after a minute.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in a minute")
		}
		time.Sleep(time.Millisecond)
	}
}
