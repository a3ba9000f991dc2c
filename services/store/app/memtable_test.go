package app

import (
	"fmt"
	"strings"
	"testing"
)

// TestMemTablesBoundedByMemTableBytes: after writes of many times
// Config.MemTableBytes, pebble's memtables (the one being filled and
// those queued for flushing) hold a few MemTableBytes, not pebble's
// default 4 MiB each.
func TestMemTablesBoundedByMemTableBytes(t *testing.T) {
	const size = 512 << 10
	cfg := testConfig(t)
	cfg.MemTableBytes = size
	m := start(t, cfg)
	// 8 MiB of values: with pebble's default the memtables would have
	// grown to 4 MiB each by now.
	val := strings.Repeat("v", 16<<10)
	for i := range 512 {
		m.put(t, fmt.Sprintf("/k/%05d", i), val)
	}
	mt := m.app.db.Metrics().MemTable
	if mt.Size == 0 || mt.Size > 3*size {
		t.Errorf("memtables hold %d bytes in %d memtables, want at most 3 × %d", mt.Size, mt.Count, size)
	}
}
