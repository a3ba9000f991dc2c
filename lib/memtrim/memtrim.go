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
// resident size returns to the live heap plus the binary.
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
	// DefaultIdleCheck is how often the process looks whether it is idle.
	DefaultIdleCheck = 10 * time.Second
	// IdleAllocRate is the allocation rate (bytes per second, averaged
	// over one check) under which the process counts as idle: an idle
	// all-in-one (raft heartbeats, leases, health checks) allocates
	// ~160 KB/s, one client's GETs ~20 MB/s.
	IdleAllocRate = 1 << 20
	// MinRelease is the free, unreleased heap below which an idle
	// process keeps it: a release costs a full collection.
	MinRelease = 16 << 20
)

// Options are the process-level memory settings.
type Options struct {
	// MemoryLimit is Go's soft memory limit (debug.SetMemoryLimit), as a
	// Kubernetes quantity ("512Mi"); empty keeps GOMEMLIMIT's (none by
	// default).
	MemoryLimit string
	// IdleCheck is how often the process checks whether it is idle and
	// holds free heap it could return; 0 never returns it early.
	IdleCheck time.Duration
}

// AddFlags defines --memory-limit and --idle-memory-release on fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.MemoryLimit, "memory-limit", "", "Go's soft memory limit (as GOMEMLIMIT), a quantity such as 512Mi: above it the process collects garbage more often; empty: GOMEMLIMIT's value, none by default")
	fs.DurationVar(&o.IdleCheck, "idle-memory-release", DefaultIdleCheck, "how often to check whether the process is idle (allocating under 1 MiB/s) and holds more than 16 MiB of free heap, which it then returns to the operating system; 0: only the Go runtime's own scavenging")
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

// releaseWhenIdle checks every period whether the process allocated
// less than IdleAllocRate since the last check and holds at least
// MinRelease of heap it could return: free pages not yet returned, and
// objects beyond the live heap of the last collection (garbage the next
// collection frees). Then it releases (release).
// Heap the runtime cannot return (free slots in spans that still hold
// live objects) is not counted, so an idle process releases once, not
// at every check.
func releaseWhenIdle(ctx context.Context, logger *slog.Logger, period time.Duration) {
	samples := []metrics.Sample{
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/gc/heap/live:bytes"},
	}
	metrics.Read(samples)
	last := samples[0].Value.Uint64()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		metrics.Read(samples)
		allocs := samples[0].Value.Uint64()
		allocated := allocs - last
		last = allocs
		reclaimable := int64(samples[1].Value.Uint64()) + int64(samples[2].Value.Uint64()) - int64(samples[3].Value.Uint64())
		if float64(allocated) >= IdleAllocRate*period.Seconds() || reclaimable < MinRelease {
			continue
		}
		release()
		metrics.Read(samples)
		last = samples[0].Value.Uint64()
		logger.Debug("idle: returned free heap to the operating system", "reclaimable_bytes", reclaimable, "live_bytes", samples[3].Value.Uint64())
	}
}
