package resources

import (
	"fmt"
	"testing"
)

// TestObjectHintsBoundCountsCapacity checks that the hints' bound holds
// for the memory they keep: each value's whole backing array, its key
// and its map slot, not only the value's length.
func TestObjectHintsBoundCountsCapacity(t *testing.T) {
	const limit = 64 << 10
	h := objectHints{limit: limit}
	for i := range 1000 {
		// An encoder's buffer: 100 bytes of object in 1,000 of array.
		value := make([]byte, 100, 1000)
		h.put(fmt.Sprintf("/registry/configmaps/ns/cm-%04d", i), value, int64(i+1))

		kept := 0
		for key, kv := range h.m {
			kept += cap(kv.Value) + len(key) + hintEntryBytes
		}
		if kept > limit {
			t.Fatalf("after %d puts the hints keep %d bytes (%d hints), over the bound %d", i+1, kept, len(h.m), limit)
		}
		if kept != h.bytes {
			t.Fatalf("after %d puts the hints count %d bytes, keep %d", i+1, h.bytes, kept)
		}
	}
	if len(h.m) == 0 {
		t.Fatal("no hint kept")
	}
	// The last one written is kept: the next update of it starts there.
	if kv, ok := h.m["/registry/configmaps/ns/cm-0999"]; !ok || kv.ModRevision != 1000 {
		t.Fatalf("the last hint: %+v, %v", kv, ok)
	}
}

// TestObjectHintsLimit checks that a hint costing more than a sixteenth
// of the bound is not kept and drops the key's older hint, and that a
// zero bound keeps none.
func TestObjectHintsLimit(t *testing.T) {
	h := objectHints{limit: 16 << 10}
	h.put("k", make([]byte, 100), 1)
	if _, ok := h.m["k"]; !ok {
		t.Fatal("a small hint was not kept")
	}
	h.put("k", make([]byte, 1<<10), 2)
	if kv, ok := h.m["k"]; ok {
		t.Fatalf("a hint over a sixteenth of the bound was kept, rev %d", kv.ModRevision)
	}
	if h.bytes != 0 {
		t.Fatalf("no hint kept, %d bytes counted", h.bytes)
	}

	var none objectHints
	none.put("k", make([]byte, 1), 1)
	if len(none.m) != 0 {
		t.Fatal("a zero bound kept a hint")
	}
}
