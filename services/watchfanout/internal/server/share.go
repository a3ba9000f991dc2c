package server

import (
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
)

// maxShared bounds the watches one shared message names: the ids make
// the message longer by up to 10 bytes each.
const maxShared = 4096

// maxMisses bounds the ready watches shareBatch looks at past the last one
// that joined. The dispatcher queues an event to the watchers it concerns
// one after the other, so watches that share a batch sit together on the
// ready list; the bound keeps a long list of unrelated watches (many
// collections written at once) from costing each message a look at all
// of them.
const maxMisses = 32

// shareBatch finds the other watches of the stream that w's batch of
// items goes to as well, and takes that batch for them: it returns their
// ids, for WatchManyResponse.also, or nil.
//
// One write reaches every watcher of a collection at about the same time,
// so their watches are on the ready list together, each with the same
// items queued (the same *cache.Event and kind, so in the same format the
// same frame bytes). Sending the batch once for all of them, instead of
// once per watch, saves a gRPC message per watch on both ends of the
// stream.
//
// A watch joins when it reads shared messages, has w's format, is live
// and not stopping, has credit (the shared message takes one, as its own
// would), and its next items not sent yet (what it queued, taken now
// when it holds none) start with exactly w's batch: then those items
// count as sent, and the rest stays in its items for its own drain. A watch whose
// items differ keeps what it took, as drain would have taken it, so no
// event is lost or sent twice and each watch's order is kept.
//
// Called by the sender only. Watches on the ready list are the sender's
// (their sched flag is set and only the sender takes them off the list),
// so it may touch the fields their running goroutine owns; other
// goroutines only append to the list, under mu.
func (m *mux) shareBatch(w *watch, batch []cache.Item) []int64 {
	if len(batch) == 0 {
		return nil
	}
	m.mu.Lock()
	m.peers = append(m.peers[:0], m.ready[:min(len(m.ready), maxShared)]...)
	m.mu.Unlock()
	also := m.also[:0]
	misses := 0
	for _, v := range m.peers {
		if misses >= maxMisses {
			break
		}
		if v != w && v.joins(w, batch) {
			also = append(also, v.id)
			misses = 0
		} else {
			misses++
		}
	}
	clear(m.peers)
	m.also = also
	if len(also) == 0 {
		return nil
	}
	return also
}

// joins takes batch as v's next message, if v's next items are batch and
// it may send one now (see shareBatch).
func (v *watch) joins(w *watch, batch []cache.Item) bool {
	if !v.shared || v.f != w.f || v.setup || v.finished || v.sub == nil || v.stopped.Load() != 0 {
		return false
	}
	if v.window > 0 && v.credit.Load() <= 0 {
		return false
	}
	if v.next == len(v.items) {
		items, err := v.sub.TryNext(v.items[:0])
		if err != nil {
			return false // its drain ends it
		}
		v.items, v.next = items, 0
	}
	rest := v.items[v.next:]
	if len(rest) < len(batch) {
		return false
	}
	for i, it := range batch {
		if rest[i] != it {
			return false
		}
	}
	clear(rest[:len(batch)])
	v.next += len(batch)
	if v.window > 0 {
		v.credit.Add(-1)
	}
	return true
}
