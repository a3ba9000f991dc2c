package memtrim

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
)

// keepLimit restores the process's memory limit when t ends.
func keepLimit(t *testing.T) int64 {
	orig := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(orig) })
	return orig
}

// TestPacerLimitsWhileBursts checks that the first burst sets the limit
// to what the process held plus the bound and its headroom, that later
// bursts leave it, and that the last to end restores the limit there was.
func TestPacerLimitsWhileBursts(t *testing.T) {
	keepLimit(t)
	debug.SetMemoryLimit(math.MaxInt64)
	const bound = 256 << 20
	p := NewPacer()
	before, _ := held()
	p.Begin(bound)
	during := debug.SetMemoryLimit(-1)
	after, _ := held()
	if lo, hi := before+bound+bound/headroomDivisor, after+bound+bound/headroomDivisor; during < min(lo, hi) || during > max(lo, hi) {
		t.Fatalf("with a burst the limit is %d, want the memory held (%d–%d) plus %d", during, before, after, bound+bound/headroomDivisor)
	}
	p.Begin(bound)
	p.End()
	if got := debug.SetMemoryLimit(-1); got != during {
		t.Fatalf("with the second burst ended and the first in progress the limit is %d, want %d", got, during)
	}
	p.End()
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Fatalf("after the last burst the limit is %d, want none", got)
	}
}

// TestPacerKeepsConfiguredLimit checks that a burst never raises the
// limit the process was configured with, and restores it.
func TestPacerKeepsConfiguredLimit(t *testing.T) {
	keepLimit(t)
	const configured = 1 << 40
	debug.SetMemoryLimit(configured)
	p := NewPacer()
	p.Begin(1 << 50)
	if got := debug.SetMemoryLimit(-1); got != configured {
		t.Fatalf("with a burst of a bound above it the limit is %d, want the configured %d", got, configured)
	}
	p.End()
	p.Begin(64 << 20)
	if got := debug.SetMemoryLimit(-1); got >= configured {
		t.Fatalf("with a small burst the limit is %d, want below the configured %d", got, configured)
	}
	p.End()
	if got := debug.SetMemoryLimit(-1); got != configured {
		t.Fatalf("after the bursts the limit is %d, want the configured %d", got, configured)
	}
}

var burstSink [][]byte

// TestPacerBaseAfterBursts checks that what the process held when the
// last bursts began stands until two collections have run since they
// ended (before that, the live heap the last collection found counts what
// they held), and is measured again after.
func TestPacerBaseAfterBursts(t *testing.T) {
	keepLimit(t)
	debug.SetMemoryLimit(math.MaxInt64)
	const bound = 64 << 20
	p := NewPacer()
	runtime.GC()
	p.Begin(bound)
	first := debug.SetMemoryLimit(-1)
	// The burst's memory, live at a collection during it.
	for range 32 {
		burstSink = append(burstSink, make([]byte, 1<<20))
	}
	runtime.GC()
	burstSink = nil
	p.End()

	// The live heap of the last collection holds the burst's 32 MiB.
	p.Begin(bound)
	if got := debug.SetMemoryLimit(-1); got != first {
		t.Fatalf("with no collection since the burst the limit is %d, want the last bursts' %d", got, first)
	}
	p.End()

	// Live now, and not the burst's: measured again once two collections
	// have run.
	for range 32 {
		burstSink = append(burstSink, make([]byte, 1<<20))
	}
	runtime.GC()
	runtime.GC()
	p.Begin(bound)
	if got := debug.SetMemoryLimit(-1); got < first+16<<20 {
		t.Fatalf("with 32 MiB more live and two collections since the burst the limit is %d, want it measured again (the last was %d)", got, first)
	}
	p.End()
	burstSink = nil
}

// TestBurstLimitFollowsTheProcess checks the limit's arithmetic: the
// bursts' bound and headroom beyond the memory held before them, but
// never less than what the process holds now plus the headroom (so that
// a process that grew while bursts kept overlapping is not collected
// back to back), and never above the configured limit.
func TestBurstLimitFollowsTheProcess(t *testing.T) {
	const (
		mib   = 1 << 20
		bound = 512 * mib
		room  = bound / headroomDivisor
		none  = math.MaxInt64
	)
	for _, c := range []struct {
		name                   string
		base, now, limit, want int64
	}{
		{"first burst", 100 * mib, 100 * mib, none, 100*mib + bound + room},
		{"bursts hold less than the bound", 100 * mib, 500 * mib, none, 100*mib + bound + room},
		{"the process grew past the bound", 100 * mib, 900 * mib, none, 900*mib + room},
		{"configured limit", 100 * mib, 900 * mib, 700 * mib, 700 * mib},
		{"bound too large", 100 * mib, 100 * mib, 900 * mib, 900 * mib},
	} {
		b := int64(bound)
		if c.name == "bound too large" {
			b = math.MaxInt64 / 2
		}
		if got := burstLimit(c.base, c.now, b, c.limit); got != c.want {
			t.Errorf("%s: burstLimit(%d, %d, %d, %d) = %d, want %d", c.name, c.base, c.now, b, c.limit, got, c.want)
		}
	}
}
