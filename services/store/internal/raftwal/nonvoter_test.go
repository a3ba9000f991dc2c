package raftwal

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
)

// configEntry is configuration entry index listing voters a, b, c and the
// local member "nv" with the given suffrage.
func configEntry(index uint64, nv raft.ServerSuffrage) *raft.Log {
	cfg := raft.Configuration{Servers: []raft.Server{
		{Suffrage: raft.Voter, ID: "a", Address: "a:1"},
		{Suffrage: raft.Voter, ID: "b", Address: "b:1"},
		{Suffrage: raft.Voter, ID: "c", Address: "c:1"},
		{Suffrage: nv, ID: "nv", Address: "nv:1"},
	}}
	return &raft.Log{Index: index, Term: 1 + index/100, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(cfg)}
}

// crashFS is a filesystem that can lose what was not synced.
type crashFS struct {
	t  *testing.T
	fs *vfs.MemFS
}

func newCrashFS(t *testing.T) *crashFS {
	fs := vfs.NewCrashableMem()
	if err := fs.MkdirAll("/log", 0o700); err != nil {
		t.Fatal(err)
	}
	d, err := fs.OpenDir("/")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	return &crashFS{t: t, fs: fs}
}

// crash replaces the filesystem by what a crash may leave of it: what was
// synced, and each unsynced 4 KiB block with probability keep percent.
func (c *crashFS) crash(keep int, rng *rand.Rand) {
	c.fs = c.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: keep, RNG: rng})
}

// open opens the log on the filesystem as member "nv", counting synced
// appends in *syncs.
func (c *crashFS) open(segBytes int64, syncs *int) *Log {
	c.t.Helper()
	return open(c.t, "/log", Options{FS: c.fs, SegmentBytes: segBytes, LocalID: "nv", ObserveSync: func(time.Duration) { *syncs++ }})
}

// checkPrefix fails unless l holds entries 1..last, its first entry being
// the configuration entry of configEntry, and last is at least min.
func checkPrefix(t *testing.T, l *Log, min uint64) uint64 {
	t.Helper()
	first, last := must(l.FirstIndex()), must(l.LastIndex())
	if first != 1 || last < min {
		t.Fatalf("log holds %d..%d after the crash, want 1..n with n >= %d", first, last, min)
	}
	var e raft.Log
	if err := l.GetLog(1, &e); err != nil || e.Type != raft.LogConfiguration {
		t.Fatalf("entry 1: %+v %v", e, err)
	}
	if last > 1 {
		checkEntries(t, l, 2, last)
	}
	return last
}

func TestNonvoterAppendsAreNotSyncedAndACrashLosesOnlyATail(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			c := newCrashFS(t)
			syncs := 0
			// Small segments: the unsynced appends span several.
			l := c.open(4<<10, &syncs)
			if err := l.StoreLogs([]*raft.Log{configEntry(1, raft.Nonvoter)}); err != nil {
				t.Fatal(err)
			}
			for lo := uint64(2); lo <= 400; lo += 7 {
				if err := l.StoreLogs(entries(lo, lo+6)); err != nil {
					t.Fatal(err)
				}
			}
			// The configuration entry's batch, and the tail of each
			// segment a new one followed.
			segs := len(l.segs)
			if syncs != segs {
				t.Fatalf("%d syncs for %d segments: want one for the configuration entry and one per full segment", syncs, segs)
			}
			sealed := l.segs[segs-2].last()
			// No Close: the process dies.
			c.crash(int(seed*5), rng)

			l = c.open(4<<10, &syncs)
			last := checkPrefix(t, l, sealed)
			// raft sends what was lost again.
			if err := l.StoreLogs(entries(last+1, 420)); err != nil {
				t.Fatal(err)
			}
			if err := l.Sync(); err != nil {
				t.Fatal(err)
			}
			c.crash(0, nil)
			l = c.open(4<<10, &syncs)
			defer l.Close()
			checkPrefix(t, l, 420)
		})
	}
}

func TestPromotionSyncsEverythingWrittenBefore(t *testing.T) {
	c := newCrashFS(t)
	syncs := 0
	l := c.open(1<<20, &syncs)
	if err := l.StoreLogs([]*raft.Log{configEntry(1, raft.Nonvoter)}); err != nil {
		t.Fatal(err)
	}
	if err := l.StoreLogs(entries(2, 20)); err != nil {
		t.Fatal(err)
	}
	// The entry that makes the member a voter, in a batch with others:
	// its acknowledgement counts in the new configuration.
	if err := l.StoreLogs(append([]*raft.Log{configEntry(21, raft.Voter)}, entries(22, 30)...)); err != nil {
		t.Fatal(err)
	}
	c.crash(0, nil)
	l = c.open(1<<20, &syncs)
	if first, last := must(l.FirstIndex()), must(l.LastIndex()); first != 1 || last != 30 {
		t.Fatalf("after promotion and a crash the log holds %d..%d, want 1..30", first, last)
	}
	checkEntries(t, l, 2, 20)
	checkEntries(t, l, 22, 30)
	// A voter's appends are synced.
	if err := l.StoreLogs(entries(31, 40)); err != nil {
		t.Fatal(err)
	}
	c.crash(0, nil)
	l = c.open(1<<20, &syncs)
	defer l.Close()
	if last := must(l.LastIndex()); last != 40 {
		t.Fatalf("a voter's appends were lost in a crash: last index %d, want 40", last)
	}
	checkEntries(t, l, 31, 40)
}

func TestSuffrageIsReadBackAtOpen(t *testing.T) {
	c := newCrashFS(t)
	syncs := 0
	l := c.open(1<<20, &syncs)
	if err := l.StoreLogs([]*raft.Log{configEntry(1, raft.Nonvoter)}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	syncs = 0
	l = c.open(1<<20, &syncs)
	if err := l.StoreLogs(entries(2, 10)); err != nil {
		t.Fatal(err)
	}
	if syncs != 0 {
		t.Fatalf("a reopened non-voter's log synced %d appends", syncs)
	}
	// Close syncs them.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	c.crash(0, nil)
	l = c.open(1<<20, &syncs)
	defer l.Close()
	checkPrefix(t, l, 10)
}

func TestSnapshotConfigurationDecides(t *testing.T) {
	c := newCrashFS(t)
	syncs := 0
	l := c.open(1<<20, &syncs)
	defer l.Close()
	// No configuration known: a voter.
	if err := l.StoreLogs(entries(1, 5)); err != nil {
		t.Fatal(err)
	}
	if syncs != 1 {
		t.Fatalf("%d syncs without a known configuration, want 1", syncs)
	}
	nonvoter := raft.DecodeConfiguration(configEntry(3, raft.Nonvoter).Data)
	if err := l.NoteSnapshotConfiguration(nonvoter, 3); err != nil {
		t.Fatal(err)
	}
	if err := l.StoreLogs(entries(6, 10)); err != nil {
		t.Fatal(err)
	}
	if syncs != 1 {
		t.Fatalf("%d syncs after a snapshot listing the member as a non-voter, want still 1", syncs)
	}
	// A newer snapshot makes it a voter: what was unsynced is synced.
	voter := raft.DecodeConfiguration(configEntry(8, raft.Voter).Data)
	if err := l.NoteSnapshotConfiguration(voter, 8); err != nil {
		t.Fatal(err)
	}
	if syncs != 2 {
		t.Fatalf("%d syncs after the member became a voter, want 2", syncs)
	}
	// An older snapshot changes nothing.
	if err := l.NoteSnapshotConfiguration(nonvoter, 3); err != nil {
		t.Fatal(err)
	}
	if err := l.StoreLogs(entries(11, 12)); err != nil {
		t.Fatal(err)
	}
	if syncs != 3 {
		t.Fatalf("%d syncs, want 3: an older snapshot's configuration was followed", syncs)
	}
	c.crash(0, nil)
	l2 := c.open(1<<20, &syncs)
	defer l2.Close()
	checkLog(t, l2, 1, 12)
}

func TestTruncatedConfigurationEntryNoLongerCounts(t *testing.T) {
	c := newCrashFS(t)
	syncs := 0
	l := c.open(1<<20, &syncs)
	defer l.Close()
	if err := l.StoreLogs([]*raft.Log{configEntry(1, raft.Voter)}); err != nil {
		t.Fatal(err)
	}
	if err := l.StoreLogs(entries(2, 10)); err != nil {
		t.Fatal(err)
	}
	// An uncommitted entry demoting the member, which a new leader's log
	// replaces: the member is a voter again.
	if err := l.StoreLogs([]*raft.Log{configEntry(11, raft.Nonvoter)}); err != nil {
		t.Fatal(err)
	}
	if err := l.StoreLogs(entries(12, 15)); err != nil {
		t.Fatal(err)
	}
	before := syncs
	if err := l.DeleteRange(11, 15); err != nil {
		t.Fatal(err)
	}
	if err := l.StoreLogs(entries(11, 20)); err != nil {
		t.Fatal(err)
	}
	if syncs != before+1 {
		t.Fatalf("append after the demotion was truncated: %d syncs, want %d", syncs, before+1)
	}
	// Emptying the log (after a snapshot is installed) forgets its
	// configuration entries: the snapshot's counts, here none.
	if err := l.StoreLogs([]*raft.Log{configEntry(21, raft.Nonvoter)}); err != nil {
		t.Fatal(err)
	}
	if err := l.DeleteRange(1, 21); err != nil {
		t.Fatal(err)
	}
	before = syncs
	if err := l.StoreLogs(entries(500, 510)); err != nil {
		t.Fatal(err)
	}
	if syncs != before+1 {
		t.Fatalf("append after the log was emptied: %d syncs, want %d", syncs, before+1)
	}
}

func TestWithoutLocalIDEveryAppendSyncs(t *testing.T) {
	c := newCrashFS(t)
	syncs := 0
	l := open(t, "/log", Options{FS: c.fs, ObserveSync: func(time.Duration) { syncs++ }})
	if err := l.StoreLogs([]*raft.Log{configEntry(1, raft.Nonvoter)}); err != nil {
		t.Fatal(err)
	}
	if err := l.StoreLogs(entries(2, 10)); err != nil {
		t.Fatal(err)
	}
	if syncs != 2 {
		t.Fatalf("%d syncs, want 2", syncs)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); err == nil || errors.Is(err, nil) {
		t.Fatal("Sync after Close succeeded")
	}
}

// A non-voter among an even number of voters syncs every append: promoted
// from there, an acknowledgement of unsynced entries could complete a
// quorum of the new configuration.
func TestNonvoterAmongEvenVotersSyncs(t *testing.T) {
	c := newCrashFS(t)
	syncs := 0
	l := c.open(1<<20, &syncs)
	defer l.Close()
	cfg := raft.Configuration{Servers: []raft.Server{
		{Suffrage: raft.Voter, ID: "a", Address: "a:1"},
		{Suffrage: raft.Voter, ID: "b", Address: "b:1"},
		{Suffrage: raft.Voter, ID: "c", Address: "c:1"},
		{Suffrage: raft.Voter, ID: "d", Address: "d:1"},
		{Suffrage: raft.Nonvoter, ID: "nv", Address: "nv:1"},
	}}
	even := &raft.Log{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: raft.EncodeConfiguration(cfg)}
	if err := l.StoreLogs([]*raft.Log{even}); err != nil {
		t.Fatal(err)
	}
	before := syncs
	for lo := uint64(2); lo <= 20; lo += 2 {
		if err := l.StoreLogs(entries(lo, lo+1)); err != nil {
			t.Fatal(err)
		}
	}
	if got := syncs - before; got != 10 {
		t.Fatalf("%d syncs for 10 appends among 4 voters, want 10", got)
	}
	// Back to three voters: appends skip the sync again.
	if err := l.StoreLogs([]*raft.Log{configEntry(22, raft.Nonvoter)}); err != nil {
		t.Fatal(err)
	}
	before = syncs
	if err := l.StoreLogs(entries(23, 30)); err != nil {
		t.Fatal(err)
	}
	if syncs != before {
		t.Fatalf("%d syncs for an append among 3 voters, want 0", syncs-before)
	}
}
