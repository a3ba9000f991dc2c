package watchpark

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
)

// parkerFunc is a Parker of a function.
type parkerFunc func(wake func()) bool

func (f parkerFunc) Park(wake func()) bool { return f(wake) }

func TestNilHandoff(t *testing.T) {
	h := From(context.Background())
	ran := false
	h.Defer(func() { ran = true })
	if !ran {
		t.Error("Defer of a nil Handoff did not run at once")
	}
	if h.Park(parkerFunc(func(func()) bool { t.Fatal("arranged"); return true }), func() {}) {
		t.Error("a nil Handoff parked")
	}
	h.Returned(nil)
}

// TestParkedWatch: a watch parked on its handler's goroutine is resumed
// only once the handler has returned, even when its wake-up came before;
// its end runs what was deferred, in order, then the response's end.
func TestParkedWatch(t *testing.T) {
	h := New(nil)
	ctx := With(context.Background(), h)
	var mu sync.Mutex
	var order []string
	note := func(s string) func() {
		return func() { mu.Lock(); order = append(order, s); mu.Unlock() }
	}
	ended := make(chan bool, 1)
	resumed := make(chan struct{})
	var wake func()
	// The handler's goroutine: the watch parks, and the wake-up comes
	// at once, before the handler has returned.
	if !From(ctx).Park(parkerFunc(func(w func()) bool { wake = w; return true }), func() {
		close(resumed)
		From(ctx).End(errors.New("gone"))
	}) {
		t.Fatal("did not park")
	}
	wake()
	h.Defer(note("inner"))
	h.Defer(note("outer"))
	h.Defer(func() { note("err=" + h.Err().Error())() })
	select {
	case <-resumed:
		t.Fatal("resumed before the handler returned")
	default:
	}
	if len(order) != 0 {
		t.Fatalf("deferred functions ran before the watch's end: %v", order)
	}
	h.Returned(func(abort bool) { ended <- abort })
	<-resumed
	if abort := <-ended; abort {
		t.Error("a watch that ended was aborted")
	}
	if want := []string{"inner", "outer", "err=gone"}; !reflect.DeepEqual(order, want) {
		t.Errorf("ran %v, want %v", order, want)
	}
}

// TestNotParked: a watch whose arrangement fails does not park, and
// Defer runs at once.
func TestNotParked(t *testing.T) {
	h := New(nil)
	if h.Park(parkerFunc(func(func()) bool { return false }), func() {}) {
		t.Fatal("parked")
	}
	ran := false
	h.Defer(func() { ran = true })
	if !ran || h.Parked() {
		t.Error("an unparked watch's Defer did not run at once")
	}
}

// TestResumePanic: a panic in a resumed watch ends it with its stream
// reset, after its deferred functions.
func TestResumePanic(t *testing.T) {
	h := New(nil)
	var wake func()
	h.Park(parkerFunc(func(w func()) bool { wake = w; return true }), func() { panic("boom") })
	deferred := false
	h.Defer(func() { deferred = true })
	ended := make(chan bool, 1)
	h.Returned(func(abort bool) { ended <- abort })
	wake()
	if abort := <-ended; !abort || !deferred {
		t.Errorf("abort %v, deferred ran %v; want both", abort, deferred)
	}
}
