package resources

import (
	"sync"

	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
)

// An update, patch or apply reads the stored object, computes its
// replacement and stores it guarded by the mod revision it read. The read
// costs a store round trip on every write, though the object is often one
// this gateway has just written (a controller updating what it created, a
// second apply). objectHints keeps the objects this gateway last wrote, as
// stored, so that the first attempt of an update can start from one of
// them instead (updateLoop).
//
// A hint is only a guess: the write that starts from one is guarded by
// the hint's mod revision, so it commits only when the hint was the stored
// object; anything else the attempt produces (a conflict, a validation
// error, a failed precondition) is discarded and the update starts over
// from a read, so no client ever sees an answer computed from a stale
// hint. What keeps hints mostly right is that every change the store
// makes is observed (ObserveChange, from the garbage collector's watch of
// the whole registry) and drops a hint it outdates.

// DefaultUpdateHintBytes is the default of Config.UpdateHintBytes.
const DefaultUpdateHintBytes = 16 << 20

// hintEntryBytes is what one hint costs besides its key's and value's
// bytes: its slot in the map (the key's string header and the KV) at the
// map's load factor.
const hintEntryBytes = 96

// hintCost is the memory a hint of key holding value keeps: the value's
// whole backing array (cap, not len: the encoder's buffer may be larger
// than the object), the key's bytes and its map slot.
func hintCost(key string, value []byte) int {
	return cap(value) + len(key) + hintEntryBytes
}

// objectHints maps a store key to the object last written there by this
// gateway, as stored. It is safe for concurrent use.
//
// Invariant, under mu: bytes is the sum of hintCost over m and never
// exceeds limit.
type objectHints struct {
	// limit bounds bytes; a hint that alone costs more than a sixteenth
	// of it is not kept. Set before first use; 0 keeps no hints.
	limit int

	mu       sync.Mutex
	m        map[string]storage.KV
	bytes    int
	updating map[string]int // updates in progress per key
}

// begin marks an update of key as in progress and returns the hint to
// start it from, if any; end must follow. While another update of the
// same key is in progress, there is no hint: that update is about to
// outdate it, and an attempt from it would likely be wasted (a failed
// transaction is a raft round trip).
func (h *objectHints) begin(key string) (storage.KV, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.updating == nil {
		h.updating = map[string]int{}
	}
	h.updating[key]++
	if h.updating[key] > 1 {
		return storage.KV{}, false
	}
	kv, ok := h.m[key]
	return kv, ok
}

// end marks the end of an update begun with begin.
func (h *objectHints) end(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.updating[key]--; h.updating[key] <= 0 {
		delete(h.updating, key)
	}
}

// put records that key holds value at modRev, dropping other hints while
// the bound would be exceeded. value must not change afterwards.
func (h *objectHints) put(key string, value []byte, modRev int64) {
	cost := hintCost(key, value)
	if cost > h.limit/16 {
		h.forget(key)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]storage.KV{}
	}
	h.dropLocked(key)
	for k := range h.m {
		if h.bytes+cost <= h.limit {
			break
		}
		h.dropLocked(k)
	}
	h.m[key] = storage.KV{Key: key, Value: value, ModRevision: modRev}
	h.bytes += cost
}

// observe drops the hint for key unless it is the version at modRev: the
// store changed key at modRev.
func (h *objectHints) observe(key string, modRev int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if kv, ok := h.m[key]; ok && kv.ModRevision != modRev {
		h.dropLocked(key)
	}
}

// forget drops the hint for key.
func (h *objectHints) forget(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropLocked(key)
}

// clear drops every hint: changes may have gone unobserved.
func (h *objectHints) clear() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.m, h.bytes = nil, 0
}

func (h *objectHints) dropLocked(key string) {
	if kv, ok := h.m[key]; ok {
		h.bytes -= hintCost(key, kv.Value)
		delete(h.m, key)
	}
}
