package server

import (
	"slices"
	"testing"
	"time"
)

// TestSlots: n jobs hold a slot at once; the others are parked and, as
// slots are released, each starts holding the released slot, oldest
// first; a slot released with nothing parked is free again.
func TestSlots(t *testing.T) {
	s := newSlots(2)
	started := make(chan int, 3)
	job := func(i int) func() { return func() { started <- i } }
	for i := range 2 {
		if !s.acquire(job(i)) {
			t.Fatalf("job %d found no free slot of 2", i)
		}
	}
	for i := 2; i < 5; i++ {
		if s.acquire(job(i)) {
			t.Fatalf("job %d took a slot of 2 held", i)
		}
	}
	var order []int
	for range 3 {
		s.release() // the oldest parked job starts, holding the slot
		select {
		case i := <-started:
			order = append(order, i)
		case <-time.After(waitLimit):
			t.Fatal("a released slot started no parked job")
		}
	}
	if !slices.Equal(order, []int{2, 3, 4}) {
		t.Fatalf("parked jobs started in the order %v", order)
	}
	s.release()
	s.release()
	if s.free != 2 || s.waiting != nil {
		t.Fatalf("free %d, %d waiting after every job released its slot", s.free, len(s.waiting))
	}
	if !s.acquire(nil) || !s.acquire(nil) || s.acquire(job(5)) {
		t.Fatal("the two slots are not free again, or a third was")
	}
}
