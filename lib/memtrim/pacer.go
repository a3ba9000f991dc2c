package memtrim

import (
	"math"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Pacer paces the garbage collector to bursts of bounded memory, such as
// the lists a list budget lets run at once: while at least one burst is
// in progress, Go's soft memory limit is what the process held when the
// first of them began, plus the bursts' bound, plus a quarter of it
// (headroomDivisor); when the last ends, the limit goes back to what it
// was. While bursts overlap without a pause, the memory held when the
// first began stands, however long they last, except that the limit
// never falls below what the process holds now (its live heap at the
// last collection and the runtime's own memory) plus the headroom: if
// the rest of the process grows while lists keep overlapping (a cache
// filling under writes), the limit follows it instead of making the
// collector run back to back.
//
// Without it the collector's goal is twice the live heap (GOGC=100), so
// a relist storm that holds a few hundred MiB of lists lets the heap grow
// by twice that before a collection runs, and how far it grows depends on
// when the last collection ran. With it, the heap is collected before the
// process holds more than the bound and the headroom beyond its memory
// before the burst. The bound must be one the bursts keep (the budget's
// accounting of what they hold): a limit below the live heap makes the
// collector run back to back, up to the runtime's cap of half the CPU.
// An ordinary list is a burst too, but one far below the bound: the
// limit is then above the collector's own goal and changes nothing.
//
// The memory limit is process-wide. Invariant: a process has one Pacer
// (its main creates it and hands it to the one owner of bounded bursts);
// after start-up (Options.Start) only the Pacer sets the limit, so what
// it restores is the configured limit (--memory-limit or GOMEMLIMIT), and
// it never sets one above it.
type Pacer struct {
	mu sync.Mutex
	// bursts is how many bursts are in progress.
	bursts int
	// saved is the limit before the first of them began.
	saved int64
	// base is what the process held when the first burst in progress
	// (or of the last period with bursts) began.
	base int64
	// endedAt is the count of completed collections when the last burst
	// ended; 0 before one has.
	endedAt uint64
}

// headroomDivisor gives the share of the bursts' bound the limit adds
// beyond it, for the garbage made between collections: a quarter, 128
// MiB for a 512 MiB list budget.
const headroomDivisor = 4

// NewPacer returns a Pacer with no burst in progress.
func NewPacer() *Pacer { return &Pacer{} }

// Begin reports that a burst begins. bound is the most that every burst
// in progress holds together (the same for every burst: the budget's
// capacity); when none was in progress, Begin sets the limit.
func (p *Pacer) Begin(bound int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bursts++
	now, cycles := held()
	if p.bursts == 1 {
		p.saved = debug.SetMemoryLimit(-1)
		// The live heap is measured by a collection, and one that ran
		// during the last bursts counted what they held; buffers they
		// returned to sync.Pools survive one more. Until two have run
		// since they ended, the last base stands.
		if p.endedAt == 0 || cycles >= p.endedAt+2 {
			p.base = now
		}
	}
	debug.SetMemoryLimit(burstLimit(p.base, now, bound, p.saved))
}

// End reports that a burst ended; when it was the last one, End restores
// the limit Begin found.
func (p *Pacer) End() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.bursts--
	if p.bursts > 0 {
		return
	}
	debug.SetMemoryLimit(p.saved)
	_, p.endedAt = held()
}

// burstLimit is the memory limit for bursts of at most bound beyond
// base, when the process holds now: the bursts' bound beyond base, or
// now if that is more, plus the headroom, never above limit.
func burstLimit(base, now, bound, limit int64) int64 {
	held := max(base, now-bound)
	if bound > (math.MaxInt64-held)/2 {
		return limit
	}
	return min(held+bound+bound/headroomDivisor, limit)
}

// held is the memory the process holds from Go's runtime, as its memory
// limit counts it, less the heap it can reclaim: free pages not yet
// returned, and objects allocated since the last collection found the
// live heap (some of them garbage, some live; all counted as reclaimable,
// so that held is not inflated by garbage a burst follows); and the count
// of completed collections.
func held() (int64, uint64) {
	s := []metrics.Sample{
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/cycles/total:gc-cycles"},
	}
	metrics.Read(s)
	v := func(i int) int64 { return int64(s[i].Value.Uint64()) }
	sinceGC := max(v(3)-v(4), 0)
	return v(0) - v(1) - v(2) - sinceGC, s[5].Value.Uint64()
}
