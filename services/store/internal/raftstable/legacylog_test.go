package raftstable

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
)

func openLegacyLog(t *testing.T, db *pebble.DB) *LegacyLog {
	t.Helper()
	l, err := OpenLegacyLog(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func testLog(i uint64) *raft.Log {
	return &raft.Log{Index: i, Term: i / 3, Type: raft.LogCommand, Data: []byte{byte(i), 'x'},
		Extensions: []byte("ext"), AppendedAt: time.Unix(100, int64(i))}
}

func indexes(t *testing.T, s *LegacyLog) (uint64, uint64) {
	t.Helper()
	f, err := s.FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	l, err := s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	return f, l
}

func TestLogStore(t *testing.T) {
	db := openDB(t, t.TempDir())
	defer db.Close()
	s := openLegacyLog(t, db)

	if f, l := indexes(t, s); f != 0 || l != 0 {
		t.Fatalf("empty store: first=%d last=%d", f, l)
	}
	var out raft.Log
	if err := s.GetLog(1, &out); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog on empty store: %v", err)
	}

	if err := s.StoreLog(testLog(1)); err != nil {
		t.Fatal(err)
	}
	var batch []*raft.Log
	for i := uint64(2); i <= 10; i++ {
		batch = append(batch, testLog(i))
	}
	if err := s.StoreLogs(batch); err != nil {
		t.Fatal(err)
	}
	if f, l := indexes(t, s); f != 1 || l != 10 {
		t.Fatalf("first=%d last=%d, want 1, 10", f, l)
	}
	for i := uint64(1); i <= 10; i++ {
		if err := s.GetLog(i, &out); err != nil {
			t.Fatal(err)
		}
		want := testLog(i)
		if out.Index != i || out.Term != want.Term || out.Type != want.Type || !bytes.Equal(out.Data, want.Data) ||
			!bytes.Equal(out.Extensions, want.Extensions) || !out.AppendedAt.Equal(want.AppendedAt) {
			t.Fatalf("GetLog(%d) = %+v, want %+v", i, out, want)
		}
	}

	// Delete a prefix (log compaction), then a suffix (conflict truncation).
	if err := s.DeleteRange(1, 3); err != nil {
		t.Fatal(err)
	}
	if f, l := indexes(t, s); f != 4 || l != 10 {
		t.Fatalf("after prefix delete first=%d last=%d", f, l)
	}
	if err := s.GetLog(3, &out); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("deleted entry: %v", err)
	}
	if err := s.DeleteRange(8, 10); err != nil {
		t.Fatal(err)
	}
	if f, l := indexes(t, s); f != 4 || l != 7 {
		t.Fatalf("after suffix delete first=%d last=%d", f, l)
	}
	if err := s.DeleteRange(4, 7); err != nil {
		t.Fatal(err)
	}
	if f, l := indexes(t, s); f != 0 || l != 0 {
		t.Fatalf("after full delete first=%d last=%d", f, l)
	}
	if err := s.StoreLogs([]*raft.Log{testLog(20), testLog(21)}); err != nil {
		t.Fatal(err)
	}
	if f, l := indexes(t, s); f != 20 || l != 21 {
		t.Fatalf("after restart of log first=%d last=%d", f, l)
	}
	if !s.IsMonotonic() {
		t.Fatal("not monotonic")
	}
}

// TestWithLogCache runs the legacy log behind raft.NewLogCache: it is a
// complete raft.LogStore, monotonic included.
func TestWithLogCache(t *testing.T) {
	db := openDB(t, t.TempDir())
	defer db.Close()
	s := openLegacyLog(t, db)
	c, err := raft.NewLogCache(16, s)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StoreLogs([]*raft.Log{testLog(1), testLog(2)}); err != nil {
		t.Fatal(err)
	}
	var out raft.Log
	if err := c.GetLog(2, &out); err != nil || out.Index != 2 {
		t.Fatalf("cached GetLog = %+v, %v", out, err)
	}
	if !c.IsMonotonic() {
		t.Fatal("LogCache does not forward IsMonotonic")
	}
}

func BenchmarkStoreLogs(b *testing.B) {
	db, err := pebble.Open(b.TempDir(), &pebble.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	s, err := OpenLegacyLog(db, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		if err := s.StoreLogs([]*raft.Log{testLog(uint64(i + 1))}); err != nil {
			b.Fatal(err)
		}
	}
}
