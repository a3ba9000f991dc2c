package raftwal_test

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/meridian-cp/meridian/services/store/internal/raftstable"
	"github.com/meridian-cp/meridian/services/store/internal/raftwal"
)

// TestMigrateMovesThePebbleLog moves a legacy pebble log (package
// raftstable, which imports this package: hence an external test) into
// segments, after an interrupted earlier run, and leaves the stable store
// that shares its DB alone.
func TestMigrateMovesThePebbleLog(t *testing.T) {
	db, err := pebble.Open(t.TempDir(), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	old, err := raftstable.OpenLegacyLog(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	// A log that starts after a snapshot (first index > 1), as most do.
	if err := old.StoreLogs(raftwal.Entries(301, 1000)); err != nil {
		t.Fatal(err)
	}
	stable := raftstable.New(db, nil)
	if err := stable.SetUint64([]byte("CurrentTerm"), 7); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	l := raftwal.OpenForTest(t, dir, raftwal.Options{SegmentBytes: 16 << 10})

	// An interrupted earlier run copied part of the log and deleted nothing.
	part := raftwal.Entries(301, 500)
	if err := l.StoreLogs(part); err != nil {
		t.Fatal(err)
	}
	n, err := raftwal.Migrate(old, l)
	if err != nil {
		t.Fatal(err)
	}
	if n != 500 {
		t.Fatalf("moved %d entries, want the 500 the log lacked", n)
	}
	raftwal.CheckLog(t, l, 301, 1000)
	if last, _ := old.LastIndex(); last != 0 {
		t.Fatalf("old log still ends at %d", last)
	}
	if term, err := stable.GetUint64([]byte("CurrentTerm")); err != nil || term != 7 {
		t.Fatalf("stable store: term %d, %v; the migration must leave it", term, err)
	}
	if n, err := raftwal.Migrate(old, l); err != nil || n != 0 {
		t.Fatalf("second Migrate: %d entries, %v; want 0, nil", n, err)
	}
	if err := l.StoreLogs(raftwal.Entries(1001, 1001)); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = raftwal.OpenForTest(t, dir, raftwal.Options{SegmentBytes: 16 << 10})
	defer l.Close()
	raftwal.CheckLog(t, l, 301, 1001)
}
