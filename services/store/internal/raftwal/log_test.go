package raftwal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
)

func entries(lo, hi uint64) []*raft.Log { return entriesOfTerm(lo, hi, 0) }

// entriesOfTerm makes entries lo..hi; term 0 is 1+index/100.
func entriesOfTerm(lo, hi, term uint64) []*raft.Log {
	var out []*raft.Log
	for i := lo; i <= hi; i++ {
		t := term
		if t == 0 {
			t = 1 + i/100
		}
		out = append(out, &raft.Log{Index: i, Term: t, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("entry-%d", i)),
			AppendedAt: time.Unix(1700000000, int64(i))})
	}
	return out
}

// checkLog fails unless s holds exactly the entries lo..hi made by entries.
func checkLog(t *testing.T, s raft.LogStore, lo, hi uint64) {
	t.Helper()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != lo || last != hi {
		t.Fatalf("log holds %d..%d, want %d..%d", first, last, lo, hi)
	}
	checkEntries(t, s, lo, hi)
}

// checkEntries fails unless s holds the entries lo..hi made by entries.
func checkEntries(t *testing.T, s raft.LogStore, lo, hi uint64) {
	t.Helper()
	for i := lo; i <= hi; i++ {
		var e raft.Log
		if err := s.GetLog(i, &e); err != nil {
			t.Fatalf("GetLog(%d): %v", i, err)
		}
		if e.Index != i || e.Term != 1+i/100 || string(e.Data) != fmt.Sprintf("entry-%d", i) || !e.AppendedAt.Equal(time.Unix(1700000000, int64(i))) {
			t.Fatalf("entry %d read back as index %d term %d data %q", i, e.Index, e.Term, e.Data)
		}
	}
}

func open(t *testing.T, dir string, o Options) *Log {
	t.Helper()
	o.Dir = dir
	l, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestLogSurvivesReopenAndTruncates(t *testing.T) {
	dir := t.TempDir()
	syncs := 0
	// Small segments: the entries span several, so that reopening reads
	// sealed segments and head truncation deletes whole ones.
	o := Options{SegmentBytes: 8 << 10, ObserveSync: func(time.Duration) { syncs++ }}
	l := open(t, dir, o)
	for lo := uint64(1); lo <= 1000; lo += 50 {
		if err := l.StoreLogs(entries(lo, lo+49)); err != nil {
			t.Fatal(err)
		}
	}
	if syncs != 20 {
		t.Fatalf("observed %d appends, want 20", syncs)
	}
	checkLog(t, l, 1, 1000)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l = open(t, dir, o)
	checkLog(t, l, 1, 1000)
	segsBefore, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	// raft deletes a prefix after a snapshot and a suffix when a follower's
	// log conflicts with the leader's.
	if err := l.DeleteRange(1, 600); err != nil {
		t.Fatal(err)
	}
	if err := l.DeleteRange(901, 1000); err != nil {
		t.Fatal(err)
	}
	if err := l.StoreLogs(entries(901, 950)); err != nil {
		t.Fatal(err)
	}
	checkLog(t, l, 601, 950)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	segsAfter, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(segsAfter) >= len(segsBefore) {
		t.Fatalf("segments %d before the head truncation, %d after: nothing was deleted", len(segsBefore), len(segsAfter))
	}
	l = open(t, dir, o)
	defer l.Close()
	checkLog(t, l, 601, 950)
}

func TestSegmentsAreAllocatedToFullSize(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, Options{SegmentBytes: 1 << 20})
	defer l.Close()
	if segs, _ := filepath.Glob(filepath.Join(dir, "*.seg")); len(segs) != 0 {
		t.Fatalf("segments before the first append: %v", segs)
	}
	if err := l.StoreLogs(entries(1, 10)); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
	if len(segs) != 1 {
		t.Fatalf("segments: %v", segs)
	}
	st, err := os.Stat(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	// Appends write inside the file: its size is set when it is created,
	// so fdatasync has no size change to commit.
	if st.Size() != 1<<20 {
		t.Fatalf("segment size %d, want %d", st.Size(), 1<<20)
	}
}

// failingSyncFS fails every fdatasync of a file, as a disk that lost a
// write does.
type failingSyncFS struct{ vfs.FS }

func (f failingSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.FS.Create(name, c)
	return failingSyncFile{file}, err
}

type failingSyncFile struct{ vfs.File }

func (failingSyncFile) SyncData() error { return errors.New("injected: EIO") }

func TestFailedSyncIsFatal(t *testing.T) {
	var fatal error
	l := open(t, t.TempDir(), Options{FS: failingSyncFS{vfs.Default}, Fatal: func(err error) { fatal = err }})
	defer l.Close()
	err := l.StoreLogs(entries(1, 1))
	if err == nil {
		t.Fatal("StoreLogs succeeded although its fsync failed")
	}
	if fatal == nil || !strings.Contains(fatal.Error(), "injected: EIO") {
		t.Fatalf("Fatal was called with %v, want the fsync error", fatal)
	}
}

// appendGarbage writes b at the end of the log's last record, as a write
// torn by a crash leaves it.
func appendGarbage(t *testing.T, dir string, b []byte) {
	t.Helper()
	l := open(t, dir, Options{SegmentBytes: 1 << 20})
	tail := l.segs[len(l.segs)-1]
	path, end := filepath.Join(dir, tail.name), tail.end
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, end); err != nil {
		t.Fatal(err)
	}
}

func TestTornTailIsCutAtOpen(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, Options{SegmentBytes: 1 << 20})
	if err := l.StoreLogs(entries(1, 20)); err != nil {
		t.Fatal(err)
	}
	l.Close()
	// A record of entry 21 whose bytes did not all reach the disk: a
	// length and part of a body, checksum wrong.
	torn := appendRecord(nil, &raft.Log{Index: 21, Term: 1, Data: []byte("entry-21")})
	torn[len(torn)-1] ^= 0xff
	appendGarbage(t, dir, torn)

	l = open(t, dir, Options{SegmentBytes: 1 << 20})
	checkLog(t, l, 1, 20)
	// The next append takes 21's place, and a shorter record there must
	// not be followed by what is left of the torn one.
	short := &raft.Log{Index: 21, Term: 1, Type: raft.LogNoop}
	if err := l.StoreLogs([]*raft.Log{short}); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l = open(t, dir, Options{SegmentBytes: 1 << 20})
	defer l.Close()
	if last, _ := l.LastIndex(); last != 21 {
		t.Fatalf("last index %d after reopening, want 21", last)
	}
	var e raft.Log
	if err := l.GetLog(21, &e); err != nil || e.Type != raft.LogNoop {
		t.Fatalf("entry 21: %+v, %v", e, err)
	}
}

// TestTailTruncationSurvivesRestart is what a follower does when its last
// entries conflict with a new leader's: delete them, append the leader's,
// and later restart. (raft-wal v0.4.0 could not restart after it.)
func TestTailTruncationSurvivesRestart(t *testing.T) {
	for _, segBytes := range []int64{1 << 20, 4 << 10} {
		t.Run(fmt.Sprint(segBytes), func(t *testing.T) {
			dir := t.TempDir()
			o := Options{SegmentBytes: segBytes}
			l := open(t, dir, o)
			for lo := uint64(1); lo <= 300; lo += 10 {
				if err := l.StoreLogs(entries(lo, lo+9)); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.DeleteRange(251, 300); err != nil {
				t.Fatal(err)
			}
			if last, _ := l.LastIndex(); last != 250 {
				t.Fatalf("last index %d after deleting 251..300", last)
			}
			// The new leader's entries: a later term, shorter bodies than
			// the deleted ones, fewer of them.
			var mine []*raft.Log
			for i := uint64(251); i <= 260; i++ {
				mine = append(mine, &raft.Log{Index: i, Term: 9, Type: raft.LogCommand, Data: []byte("x")})
			}
			if err := l.StoreLogs(mine); err != nil {
				t.Fatal(err)
			}
			l.Close()

			l = open(t, dir, o)
			defer l.Close()
			checkEntries(t, l, 1, 250)
			if first, last := must(l.FirstIndex()), must(l.LastIndex()); first != 1 || last != 260 {
				t.Fatalf("after restart the log is %d..%d, want 1..260 (no deleted entry may come back)", first, last)
			}
			for i := uint64(251); i <= 260; i++ {
				var e raft.Log
				if err := l.GetLog(i, &e); err != nil || e.Term != 9 || string(e.Data) != "x" {
					t.Fatalf("entry %d: term %d data %q, %v", i, e.Term, e.Data, err)
				}
			}
			if err := l.StoreLogs(entries(261, 261)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestDeleteEverythingThenAppendAnywhere(t *testing.T) {
	dir := t.TempDir()
	l := open(t, dir, Options{SegmentBytes: 4 << 10})
	if err := l.StoreLogs(entries(1, 100)); err != nil {
		t.Fatal(err)
	}
	// After installing a snapshot raft deletes the whole log and goes on
	// from the snapshot's index.
	if err := l.DeleteRange(1, 100); err != nil {
		t.Fatal(err)
	}
	if first, last := must(l.FirstIndex()), must(l.LastIndex()); first != 0 || last != 0 {
		t.Fatalf("emptied log is %d..%d", first, last)
	}
	if err := l.StoreLogs(entries(5001, 5010)); err != nil {
		t.Fatal(err)
	}
	if err := l.StoreLogs(entries(5012, 5012)); err == nil {
		t.Fatal("an append that leaves a gap was accepted")
	}
	l.Close()
	l = open(t, dir, Options{SegmentBytes: 4 << 10})
	defer l.Close()
	checkLog(t, l, 5001, 5010)
	if err := l.DeleteRange(5003, 5005); err == nil {
		t.Fatal("a delete inside the log was accepted")
	}
}

func must(v uint64, err error) uint64 {
	if err != nil {
		panic(err)
	}
	return v
}
