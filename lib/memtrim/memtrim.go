// Package memtrim sets a process's memory behaviour: Go's soft memory
// limit (GOMEMLIMIT as a flag) and returning the heap's free pages to the
// operating system once the process has gone idle.
//
// After a burst of load the Go runtime keeps the pages the burst freed:
// its background scavenger only returns what lies above about 110 % of
// the next GC goal, which is twice the live heap (GOGC=100), and the goal
// only comes down at the next collection, which an idle process runs
// every two minutes (docs/benchmarks.md, "Memory after load"). The idle
// release collects once the allocation rate has fallen to an idle
// process's and gives every free page back (debug.FreeOSMemory), so the
// resident size returns to the live heap plus the binary. The rate is
// averaged over a sliding window (Options.IdleCheck) sampled checksPerWindow
// times per window, so the release follows the end of a load by one
// window, not up to two.
package memtrim

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Defaults of Options' flags.
const (
	// DefaultIdleCheck is the window over which the process must have
	// allocated under IdleAllocRate to count as idle.
	DefaultIdleCheck = 10 * time.Second
	// IdleAllocRate is the allocation rate (bytes per second, averaged
	// over one check) under which the process counts as idle: an idle
	// all-in-one (raft heartbeats, leases, health checks) allocates
	// ~160 KB/s, one client's GETs ~20 MB/s.
	IdleAllocRate = 1 << 20
	// MinRelease is the free, unreleased heap below which an idle
	// process keeps it: a release costs a full collection.
	MinRelease = 16 << 20
	// checksPerWindow is how many times per IdleCheck window the process
	// samples its allocations: a release comes at most IdleCheck divided
	// by it after the window a load ended in. Each sample is one
	// runtime/metrics read.
	checksPerWindow = 5
)

// Options are the process-level memory settings.
type Options struct {
	// MemoryLimit is Go's soft memory limit (debug.SetMemoryLimit), as a
	// Kubernetes quantity ("512Mi"); empty keeps GOMEMLIMIT's (none by
	// default).
	MemoryLimit string
	// IdleCheck is the window over which the process must have allocated
	// under IdleAllocRate to count as idle (checked checksPerWindow times
	// per window) before it returns free heap; 0 never returns it early.
	IdleCheck time.Duration
}

// AddFlags defines --memory-limit and --idle-memory-release on fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.MemoryLimit, "memory-limit", "", "Go's soft memory limit (as GOMEMLIMIT), a quantity such as 512Mi: above it the process collects garbage more often; empty: GOMEMLIMIT's value, none by default")
	fs.DurationVar(&o.IdleCheck, "idle-memory-release", DefaultIdleCheck, "return free heap to the operating system once the process has allocated under 1 MiB/s over this long (a sliding window, sampled 5 times per window) and holds more than 16 MiB it could return; 0: only the Go runtime's own scavenging")
}

// Limit parses MemoryLimit: the limit in bytes, or -1 when it is empty.
func (o Options) Limit() (int64, error) {
	if o.MemoryLimit == "" {
		return -1, nil
	}
	q, err := resource.ParseQuantity(o.MemoryLimit)
	if err != nil {
		return 0, fmt.Errorf("--memory-limit %q: %w", o.MemoryLimit, err)
	}
	if q.Sign() <= 0 {
		return 0, fmt.Errorf("--memory-limit %q: not a positive size", o.MemoryLimit)
	}
	return q.Value(), nil
}

// Start applies the memory limit and, with IdleCheck > 0, returns free
// heap to the operating system whenever the process is idle, until ctx
// is done.
func (o Options) Start(ctx context.Context, logger *slog.Logger) error {
	limit, err := o.Limit()
	if err != nil {
		return err
	}
	if limit > 0 {
		debug.SetMemoryLimit(limit)
	}
	if o.IdleCheck > 0 {
		go releaseWhenIdle(ctx, logger, o.IdleCheck)
	}
	return nil
}

// release collects twice and returns every free page to the operating
// system. One collection is not enough after a burst: it moves what the
// sync.Pools hold (the buffers of a relist storm's lists, in the gRPC,
// HTTP/2 and in-memory connection pools) to their victim caches, which
// only the next collection frees, and an idle process runs that next
// collection two minutes later.
func release() {
	runtime.GC()
	debug.FreeOSMemory()
}

// releaseWhenIdle samples the process's allocations checksPerWindow
// times per window; when it allocated less than IdleAllocRate over the
// last window (idleWindow) and holds at least MinRelease of heap it could
// return (free pages not yet returned, and objects beyond the live heap
// of the last collection: garbage the next collection frees), it
// releases (release).
// Heap the runtime cannot return (free slots in spans that still hold
// live objects) is not counted, so an idle process releases once, not
// at every check.
func releaseWhenIdle(ctx context.Context, logger *slog.Logger, window time.Duration) {
	samples := []metrics.Sample{
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/gc/heap/live:bytes"},
	}
	idle := newIdleWindow(checksPerWindow, uint64(IdleAllocRate*window.Seconds()))
	metrics.Read(samples)
	idle.add(samples[0].Value.Uint64())
	t := time.NewTicker(window / checksPerWindow)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(samples)
		reclaimable := int64(samples[1].Value.Uint64()) + int64(samples[2].Value.Uint64()) - int64(samples[3].Value.Uint64())
		if !idle.add(samples[0].Value.Uint64()) || reclaimable < MinRelease {
			continue
		}
		release()
		metrics.Read(samples)
		idle.reset(samples[0].Value.Uint64())
		logger.Debug("idle: returned free heap to the operating system", "reclaimable_bytes", reclaimable, "live_bytes", samples[3].Value.Uint64())
	}
}

// idleWindow tells from samples of the cumulative bytes allocated, taken
// at a fixed period, whether the last n periods allocated less than
// limit together. Not safe for concurrent use.
type idleWindow struct {
	// ring holds the last n+1 samples; next is where the next one goes,
	// filled how many are held.
	ring         []uint64
	next, filled int
	limit        uint64
}

func newIdleWindow(n int, limit uint64) *idleWindow {
	return &idleWindow{ring: make([]uint64, n+1), limit: limit}
}

// add records a sample and reports whether the window it ends is idle: a
// full window of samples, over which less than limit was allocated.
func (w *idleWindow) add(allocs uint64) bool {
	w.ring[w.next] = allocs
	w.next = (w.next + 1) % len(w.ring)
	w.filled = min(w.filled+1, len(w.ring))
	if w.filled < len(w.ring) {
		return false
	}
	oldest := w.ring[w.next] // the slot the next sample overwrites
	return allocs-oldest < w.limit
}

// reset forgets every sample but allocs: after a release, the next one
// waits for a whole window of new samples.
func (w *idleWindow) reset(allocs uint64) {
	w.filled, w.next = 0, 0
	w.add(allocs)
}
