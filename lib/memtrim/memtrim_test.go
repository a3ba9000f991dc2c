package memtrim

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"testing"
	"time"
)

var sink [][]byte

// TestIdleRelease: after a burst of allocations that became garbage, an
// idle process collects and returns the freed heap to the operating
// system without waiting for the runtime's periodic collection.
//
// The burst is allocated with the collector off and freed by one
// collection of the test's own, so that when the idle check starts the
// heap holds ~64 MiB of free pages, which the runtime's background
// scavenger returns only slowly: collections during the burst (their
// timing varies, more so under the race detector) could otherwise leave
// less than MinRelease to release, and nothing to check.
func TestIdleRelease(t *testing.T) {
	samples := []metrics.Sample{
		{Name: "/gc/cycles/forced:gc-cycles"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/gc/heap/live:bytes"},
	}
	reclaimable := func() int64 {
		return int64(samples[1].Value.Uint64()) + int64(samples[2].Value.Uint64()) - int64(samples[3].Value.Uint64())
	}
	gcPercent := debug.SetGCPercent(-1)
	for range 64 << 10 {
		sink = append(sink, make([]byte, 1024))
	}
	sink = nil
	runtime.GC()
	debug.SetGCPercent(gcPercent)
	metrics.Read(samples)
	forced0 := samples[0].Value.Uint64()
	if r := reclaimable(); r < MinRelease {
		t.Fatalf("setup: %d bytes reclaimable after the burst, want at least %d", r, MinRelease)
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if err := (Options{IdleCheck: 100 * time.Millisecond}).Start(ctx, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		metrics.Read(samples)
		if samples[0].Value.Uint64() > forced0 && reclaimable() < MinRelease {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %d forced collections, %d bytes reclaimable", samples[0].Value.Uint64()-forced0, reclaimable())
		}
	}
}

// TestReleaseFreesPooledBuffers: buffers a sync.Pool held when the
// process went idle (a burst's pooled buffers) are freed and returned by
// one release, not kept until a later collection.
func TestReleaseFreesPooledBuffers(t *testing.T) {
	const n, size = 64, 1 << 20
	// With the collector off, so that no collection during the Puts
	// moves them to the pool's victim cache early.
	var pool sync.Pool
	gcPercent := debug.SetGCPercent(-1)
	for range n {
		pool.Put(make([]byte, size))
	}
	debug.SetGCPercent(gcPercent)
	samples := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/free:bytes"}}
	release()
	metrics.Read(samples)
	if live := samples[0].Value.Uint64(); live >= n*size/2 {
		t.Errorf("live heap %d MiB after a release, the pool's %d MiB still held", live>>20, n*size>>20)
	}
	if free := samples[1].Value.Uint64(); free >= n*size/2 {
		t.Errorf("%d MiB of free heap kept from the operating system after a release", free>>20)
	}
	runtime.KeepAlive(&pool)
}

func TestLimit(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		bad  bool
	}{{"", -1, false}, {"512Mi", 512 << 20, false}, {"1G", 1e9, false}, {"0", 0, true}, {"-1Mi", 0, true}, {"lots", 0, true}} {
		got, err := Options{MemoryLimit: c.in}.Limit()
		if (err != nil) != c.bad || (!c.bad && got != c.want) {
			t.Errorf("Limit(%q) = %d, %v; want %d, error %t", c.in, got, err, c.want, c.bad)
		}
	}
}

// TestIdleWindow: the process counts as idle only once a whole window of
// samples shows less than the limit allocated, so the first check after a
// load ends waits for the load's last bytes to leave the window rather
// than for a window of its own; one sample of a burst inside the window
// makes it busy; a release starts the window over.
func TestIdleWindow(t *testing.T) {
	const limit = 1000
	w := newIdleWindow(5, limit)
	var allocs uint64
	step := func(n uint64) bool { allocs += n; return w.add(allocs) }
	for i := range 5 {
		if step(10) {
			t.Fatalf("idle after %d samples, before a whole window", i+1)
		}
	}
	if !step(10) {
		t.Fatal("a whole window of 10 bytes per sample is not idle")
	}
	// A load: busy while its bytes are in the window.
	if step(5000) {
		t.Fatal("idle in a window holding 5,000 bytes")
	}
	for i := range 4 {
		if step(10) {
			t.Fatalf("idle %d samples after the load, with the load still in the window", i+1)
		}
	}
	if !step(10) {
		t.Fatal("not idle a whole window after the load ended")
	}
	// Just under and at the limit over the window.
	var idle bool
	for range 5 {
		idle = step(limit/5 - 1)
	}
	if !idle {
		t.Fatal("not idle with less than the limit allocated over the window")
	}
	for range 5 {
		idle = step(limit / 5)
	}
	if idle {
		t.Fatal("idle with the limit allocated over the window")
	}
	w.reset(allocs)
	for i := range 4 {
		if step(0) {
			t.Fatalf("idle %d samples after a reset", i+1)
		}
	}
	if !step(0) {
		t.Fatal("not idle a whole window after a reset")
	}
}
