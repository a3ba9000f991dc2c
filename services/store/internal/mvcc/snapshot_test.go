package mvcc

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// TestSnapshotScanDoesNotGrowBlockCache writes a keyspace several times
// larger than the scan's room in the cache to sstables, empties the cache,
// and checks that a snapshot stream (a raft snapshot, a backup) of all of
// it leaves the block cache at most scanSlack larger, that the stream is
// complete (it restores every key), and that the cache's full capacity is
// usable by reads again afterwards.
func TestSnapshotScanDoesNotGrowBlockCache(t *testing.T) {
	const capacity = 16 << 20
	cache := pebble.NewCache(capacity)
	defer cache.Unref()
	s := newTestStoreWith(t, &pebble.Options{Cache: cache})
	val := string(bytes.Repeat([]byte("v"), 1024))
	const n = 6000 // ~6 MiB of values: more than scanSlack, less than the capacity
	for i := range n {
		s.put(fmt.Sprintf("/registry/configmaps/ns/cm-%05d", i), val)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	// Compact to L6 so the keys are in sstables only, then drop every
	// cached block by reserving the whole cache for a moment.
	if err := s.db.Compact(t.Context(), []byte{0}, []byte{0xff}, true); err != nil {
		t.Fatal(err)
	}
	cache.Reserve(capacity)()
	before := cache.Size()

	snap := s.NewSnapshot()
	var buf bytes.Buffer
	if _, err := snap.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	snap.Close()
	if grown := cache.Size() - before; grown > scanSlack {
		t.Fatalf("the snapshot scan grew the block cache by %d bytes (at most %d)", grown, scanSlack)
	}

	other := newTestStore(t)
	if err := other.Restore(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	if got := other.rng(&storev1.RangeRequest{Key: []byte("/registry/"), RangeEnd: []byte("/registry0")}); len(got.Kvs) != n {
		t.Fatalf("restored %d keys, want %d", len(got.Kvs), n)
	}

	// The reservation is gone: reads fill the cache beyond the slack.
	it, err := s.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	for ok := it.First(); ok; ok = it.Next() {
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if got := cache.Size(); got < 4<<20 {
		t.Fatalf("after the scan, a read of every key left %d bytes in the cache: the capacity is still reserved", got)
	}
}
