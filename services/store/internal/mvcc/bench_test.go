package mvcc

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// BenchmarkPointRange reads one key that has many versions (a key updated
// often, within the history kept) among others: the read of a single
// object, and the compare of every guarded write.
func BenchmarkPointRange(b *testing.B) {
	ts := newTestStore(b)
	for i := range 1000 {
		ts.put(fmt.Sprintf("/k/%04d", i), "v")
		ts.put("/k/0500", fmt.Sprintf("v%d", i))
	}
	ctx := context.Background()
	for b.Loop() {
		r, err := ts.Range(ctx, &storev1.RangeRequest{Key: []byte("/k/0500"), Serializable: true})
		if err != nil || len(r.Kvs) != 1 {
			b.Fatal(err, r)
		}
	}
}

// BenchmarkTxnBatch applies the gateway's guarded writes as the FSM does:
// several transactions in one WriteBatch, then one commit. Half are
// creates (key absent, namespace mod revision unchanged), half updates
// (mod revision equal), over a store of 10,000 keys of 1 KiB.
func BenchmarkTxnBatch(b *testing.B) {
	// The store's own block cache size (app.DefaultCacheBytes).
	cache := pebble.NewCache(128 << 20)
	defer cache.Unref()
	ts := newTestStoreWith(b, &pebble.Options{Cache: cache})
	val := string(bytes.Repeat([]byte("x"), 1024))
	nsRev := ts.put("/registry/namespaces/bench", "ns")
	mods := make(map[string]int64)
	for i := range 10000 {
		k := fmt.Sprintf("/registry/configmaps/bench/cm-%05d", i)
		mods[k] = ts.put(k, val)
	}
	const perBatch = 16
	n := 0
	for b.Loop() {
		w := ts.NewWriteBatch()
		for j := range perBatch {
			var k string
			var cmp []*storev1.Compare
			update := j%2 == 1
			if update {
				k = fmt.Sprintf("/registry/configmaps/bench/cm-%05d", (n*7919)%10000)
				cmp = []*storev1.Compare{{Key: []byte(k), Target: storev1.Compare_TARGET_MOD, Result: storev1.Compare_RESULT_EQUAL, TargetUnion: &storev1.Compare_ModRevision{ModRevision: mods[k]}}}
			} else {
				k = fmt.Sprintf("/registry/configmaps/bench/new-%08d", n)
				n++
				cmp = []*storev1.Compare{
					{Key: []byte(k), Target: storev1.Compare_TARGET_CREATE, Result: storev1.Compare_RESULT_EQUAL, TargetUnion: &storev1.Compare_CreateRevision{}},
					{Key: []byte("/registry/namespaces/bench"), Target: storev1.Compare_TARGET_MOD, Result: storev1.Compare_RESULT_EQUAL, TargetUnion: &storev1.Compare_ModRevision{ModRevision: nsRev}},
				}
			}
			resp, err := w.Txn(&storev1.TxnRequest{Compare: cmp, Success: []*storev1.RequestOp{putOp(k, val)}})
			if err != nil || !resp.Succeeded {
				b.Fatal(err, resp)
			}
			if update {
				mods[k] = resp.Header.Revision
			}
		}
		ts.applied++
		if _, err := w.Commit(ts.applied, pebble.NoSync); err != nil {
			b.Fatal(err)
		}
		w.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perBatch), "ns/txn")
}

// BenchmarkLoadLiveIndex builds the writer's index of live keys, as Open
// and Restore do, over 100,000 keys of which every tenth has ten versions
// and every hundredth is deleted.
func BenchmarkLoadLiveIndex(b *testing.B) {
	ts := newTestStore(b)
	const keys = 100000
	w := ts.NewWriteBatch()
	for i := range keys {
		k := fmt.Sprintf("/registry/configmaps/ns-%03d/cm-%06d", i%100, i)
		versions := 1
		if i%10 == 0 {
			versions = 10
		}
		for range versions {
			if _, err := w.Txn(&storev1.TxnRequest{Success: []*storev1.RequestOp{putOp(k, "v")}}); err != nil {
				b.Fatal(err)
			}
		}
		if i%100 == 0 {
			if _, err := w.Txn(&storev1.TxnRequest{Success: []*storev1.RequestOp{delOp(k, "")}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, err := w.Commit(1, pebble.NoSync); err != nil {
		b.Fatal(err)
	}
	w.Close()
	for b.Loop() {
		li, err := loadLiveIndex(ts.db)
		if err != nil || len(li.m) != keys-keys/100 {
			b.Fatal(err, len(li.m))
		}
	}
}
