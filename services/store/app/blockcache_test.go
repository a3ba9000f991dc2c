package app

import (
	"fmt"
	"strings"
	"testing"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/prometheus/client_golang/prometheus"
)

// TestBlockCacheBoundedByCacheBytes: a store whose data is many times
// Config.CacheBytes, read back in full after pebble has flushed it to
// tables, holds at most CacheBytes of blocks, and reports the cache's
// size and capacity as metrics. With the default capacity (128 MiB) the
// same reads would leave every block read cached.
func TestBlockCacheBoundedByCacheBytes(t *testing.T) {
	const capacity = 1 << 20
	cfg := testConfig(t)
	cfg.CacheBytes = capacity
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	m := start(t, cfg)
	// 16 MiB of values: pebble flushes its 4 MiB memtables to tables,
	// whose blocks every read then goes through the block cache for.
	val := strings.Repeat("v", 16<<10)
	const keys = 1024
	for i := range keys {
		m.put(t, fmt.Sprintf("/k/%05d", i), val)
	}
	for i := 0; i < keys; i += 64 {
		resp := m.rng(t, &storev1.RangeRequest{Key: []byte(fmt.Sprintf("/k/%05d", i)), RangeEnd: []byte(fmt.Sprintf("/k/%05d", i+64))})
		if len(resp.Kvs) != 64 {
			t.Fatalf("range from %d: %d keys, want 64", i, len(resp.Kvs))
		}
	}
	got := gauges(t, reg, "meridian_store_block_cache_bytes", "meridian_store_block_cache_capacity_bytes")
	if got[1] != capacity {
		t.Errorf("block cache capacity %v, want %d", got[1], capacity)
	}
	if got[0] > capacity {
		t.Errorf("block cache holds %v bytes after reading %d MiB, more than its capacity %d", got[0], keys*len(val)>>20, capacity)
	}
}

// gauges returns the values of the named unlabelled gauges in reg, in
// the order named; a missing one fails the test.
func gauges(t *testing.T, reg *prometheus.Registry, names ...string) []float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float64, len(names))
	for i, n := range names {
		found := false
		for _, mf := range mfs {
			if mf.GetName() == n && len(mf.GetMetric()) == 1 {
				out[i], found = mf.GetMetric()[0].GetGauge().GetValue(), true
			}
		}
		if !found {
			t.Fatalf("gauge %s missing", n)
		}
	}
	return out
}
