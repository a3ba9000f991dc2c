// Package mvcctest opens an MVCC store for the tests of the packages built
// on it (the state machine, the watch hub): a real pebble database in a
// temporary directory of the test.
package mvcctest

import (
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/meridian-cp/meridian/services/store/internal/mvcc"
)

// Open opens an empty store on a new pebble database in a temporary
// directory of t; the database is closed when the test ends.
func Open(t testing.TB) *mvcc.Store {
	t.Helper()
	db, err := pebble.Open(t.TempDir(), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := mvcc.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
