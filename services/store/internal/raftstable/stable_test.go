package raftstable

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
)

func openDB(t *testing.T, dir string) *pebble.DB {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

func TestStableStore(t *testing.T) {
	db := openDB(t, t.TempDir())
	defer db.Close()
	s := New(db, nil)
	if _, err := s.Get([]byte("k")); err == nil || err.Error() != "not found" {
		t.Fatalf("Get missing: %v (raft needs the text %q)", err, "not found")
	}
	if _, err := s.GetUint64([]byte("n")); err == nil || err.Error() != "not found" {
		t.Fatalf("GetUint64 missing: %v", err)
	}
	if err := s.Set([]byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("n"), 42); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get([]byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	if v, err := s.GetUint64([]byte("n")); err != nil || v != 42 {
		t.Fatalf("GetUint64 = %d, %v", v, err)
	}
	// Stable keys and log keys share the DB but not the keyspace.
	if f, l := indexes(t, openLegacyLog(t, db)); f != 0 || l != 0 {
		t.Fatalf("stable writes moved log bounds: %d %d", f, l)
	}
}

func TestReopenPersists(t *testing.T) {
	dir := t.TempDir()
	db := openDB(t, dir)
	if err := openLegacyLog(t, db).StoreLogs([]*raft.Log{testLog(5), testLog(6), testLog(7)}); err != nil {
		t.Fatal(err)
	}
	if err := New(db, nil).SetUint64([]byte("CurrentTerm"), 9); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db = openDB(t, dir)
	defer db.Close()
	s := openLegacyLog(t, db)
	if f, l := indexes(t, s); f != 5 || l != 7 {
		t.Fatalf("reopened first=%d last=%d", f, l)
	}
	var out raft.Log
	if err := s.GetLog(6, &out); err != nil || out.Term != 2 {
		t.Fatalf("reopened GetLog = %+v, %v", out, err)
	}
	if v, err := New(db, nil).GetUint64([]byte("CurrentTerm")); err != nil || v != 9 {
		t.Fatalf("reopened GetUint64 = %d, %v", v, err)
	}
}
