package app

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/raftstable"
	"github.com/meridian-cp/meridian/services/store/internal/raftwal"
)

// TestDataDirWithRaftLogInPebbleStarts starts a store on a data directory
// laid out as before the raft log moved out of pebble (entries under "r/l/"
// in the DB, no DataDir/raft): its log is moved, nothing is lost or
// applied twice, and the store goes on.
func TestDataDirWithRaftLogInPebbleStarts(t *testing.T) {
	cfg := testConfig(t)
	m := start(t, cfg)
	const n = 30
	for i := range n {
		m.put(t, fmt.Sprintf("k/%02d", i), fmt.Sprint(i))
	}
	m.stop(t)

	// Put the log back where older builds kept it.
	logDir := filepath.Join(cfg.DataDir, "raft")
	wl, err := raftwal.Open(raftwal.Options{Dir: logDir})
	if err != nil {
		t.Fatal(err)
	}
	db, err := pebble.Open(filepath.Join(cfg.DataDir, "db"), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	old, err := raftstable.OpenLegacyLog(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, _ := wl.FirstIndex()
	last, _ := wl.LastIndex()
	for i := first; i <= last; i++ {
		var e raft.Log
		if err := wl.GetLog(i, &e); err != nil {
			t.Fatal(err)
		}
		if err := old.StoreLog(&e); err != nil {
			t.Fatal(err)
		}
	}
	wl.Close()
	db.Close()
	if err := os.RemoveAll(logDir); err != nil {
		t.Fatal(err)
	}
	t.Logf("raft log %d..%d moved into pebble", first, last)

	m2 := start(t, cfg)
	got := m2.rng(t, &storev1.RangeRequest{Key: []byte("k/"), RangeEnd: []byte("k0")})
	if got.Count != n || got.Header.Revision != n {
		t.Fatalf("after the move: %d keys at revision %d, want %d at %d", got.Count, got.Header.Revision, n, n)
	}
	if rev := m2.put(t, "after", "x"); rev != n+1 {
		t.Fatalf("first write at revision %d, want %d", rev, n+1)
	}
	m2.stop(t)

	// The entries are in segments now, and gone from pebble.
	db, err = pebble.Open(filepath.Join(cfg.DataDir, "db"), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	old, err = raftstable.OpenLegacyLog(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := old.LastIndex(); l != 0 {
		t.Fatalf("pebble still holds raft entries up to %d", l)
	}
	wl, err = raftwal.Open(raftwal.Options{Dir: logDir})
	if err != nil {
		t.Fatal(err)
	}
	defer wl.Close()
	if f, _ := wl.FirstIndex(); f != first {
		t.Fatalf("segments start at %d, want %d", f, first)
	}
	if l, _ := wl.LastIndex(); l <= last {
		t.Fatalf("segments end at %d, want past %d (the write after the move)", l, last)
	}
}
