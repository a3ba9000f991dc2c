package app

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/mvcc"
)

// TestMachineCrashReplaysTheLog stops a store as a machine crash does: its
// disk keeps only what was synced. The state machine commits to pebble
// without syncing, so the crash loses its last batches; the raft log
// (synced on every append) must bring every acknowledged write back, each
// applied once.
func TestMachineCrashReplaysTheLog(t *testing.T) {
	mem := vfs.NewCrashableMem()
	cfg := testConfig(t)
	cfg.fs, cfg.MinFreeBytes, cfg.BallastBytes = mem, -1, -1
	m := start(t, cfg)
	const n = 200
	for i := range n {
		if rev := m.put(t, fmt.Sprintf("k/%03d", i), fmt.Sprint(i)); rev != int64(i+1) {
			t.Fatalf("write %d at revision %d", i, rev)
		}
	}
	// The disk as a power cut leaves it, taken while the store runs.
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	m.stop(t)

	// The test means something only if the crash lost applied state.
	db, err := pebble.Open(cfg.DataDir+"/db", &pebble.Options{FS: crashed.CrashClone(vfs.CrashCloneCfg{})})
	if err != nil {
		t.Fatal(err)
	}
	st, err := mvcc.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rev := st.Rev(); rev >= n {
		t.Fatalf("pebble kept revision %d of %d through the crash: nothing to replay, the test proves nothing", rev, n)
	} else {
		t.Logf("pebble kept revision %d of %d; the rest must come from the raft log", rev, n)
	}
	db.Close()

	cfg.fs = crashed
	m2 := start(t, cfg)
	got := m2.rng(t, &storev1.RangeRequest{Key: []byte("k/"), RangeEnd: []byte("k0")})
	if got.Count != n || got.Header.Revision != n {
		t.Fatalf("after the crash: %d keys at revision %d, want %d at %d", got.Count, got.Header.Revision, n, n)
	}
	for i, kv := range got.Kvs {
		if string(kv.Key) != fmt.Sprintf("k/%03d", i) || string(kv.Value) != fmt.Sprint(i) || kv.ModRevision != int64(i+1) || kv.Version != 1 {
			t.Fatalf("key %d after the crash: %s=%s mod %d version %d", i, kv.Key, kv.Value, kv.ModRevision, kv.Version)
		}
	}
	if rev := m2.put(t, "after", "x"); rev != n+1 {
		t.Fatalf("first write after the crash at revision %d, want %d", rev, n+1)
	}
}
