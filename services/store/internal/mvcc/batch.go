package mvcc

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// WriteBatch applies transactions and compactions to one indexed pebble
// batch: later operations read the effects of earlier ones, and Commit makes
// all of them visible, with the meta key, atomically. Only one WriteBatch is
// open at a time (it holds Store.wmu until Close).
//
// Errors returned by Txn and Compact that wrap ErrInvalidArgument,
// ErrCompacted, ErrFutureRev or ErrLeaseNotFound are request errors: the
// batch is unchanged and usable. Any other error is a storage error: the
// batch must be discarded (Close without Commit).
type WriteBatch struct {
	s *Store
	b *pebble.Batch

	rev        int64 // working current revision
	compactRev int64 // working compacted revision
	events     []*storev1.Event
	committed  bool

	// written is the newest version of every key this batch wrote; it
	// moves into the store's liveIndex when the batch commits.
	written map[string]version
}

// NewWriteBatch opens the write batch; it blocks while another is open.
func (s *Store) NewWriteBatch() *WriteBatch {
	s.wmu.Lock()
	return &WriteBatch{s: s, b: s.db.NewIndexedBatch(), rev: s.rev.Load(), compactRev: s.compactRev.Load()}
}

// Rev returns the batch's working revision.
func (w *WriteBatch) Rev() int64 { return w.rev }

// TraceEvents sets the Traceparent of the batch's events from the from-th
// on (those of the command applied last, when from is the count before
// it, EventCount) to traceparent.
func (w *WriteBatch) TraceEvents(from int, traceparent string) {
	for _, ev := range w.events[from:] {
		ev.Traceparent = traceparent
	}
}

// EventCount returns how many events the batch made so far.
func (w *WriteBatch) EventCount() int { return len(w.events) }

// Commit writes the meta key (revision, compacted revision, applied) and
// commits the batch with opts. On success it publishes the new revisions and
// applied index and returns the events of the batch in revision order; the
// caller must not modify them.
func (w *WriteBatch) Commit(applied uint64, opts *pebble.WriteOptions) ([]*storev1.Event, error) {
	m := meta{rev: w.rev, compactRev: w.compactRev, applied: applied}
	if err := w.b.Set(metaKey, m.encode(), nil); err != nil {
		return nil, fmt.Errorf("mvcc: set meta: %w", err)
	}
	// Publication order: compacted revision before the commit, revision
	// after (see the package documentation).
	if w.compactRev > w.s.compactRev.Load() {
		w.s.compactRev.Store(w.compactRev)
	}
	if err := w.b.Commit(opts); err != nil {
		return nil, fmt.Errorf("mvcc: commit: %w", err)
	}
	w.committed = true
	for k, v := range w.written {
		w.s.live.set(k, v)
	}
	w.s.rev.Store(w.rev)
	w.s.applied.Store(applied)
	return w.events, nil
}

// Close releases the batch; without a successful Commit its writes are
// discarded. Safe to call more than once.
func (w *WriteBatch) Close() {
	if w.b == nil {
		return
	}
	_ = w.b.Close()
	w.b = nil
	w.s.wmu.Unlock()
}

// newest returns the newest version of key in the batch's view if key is
// live there: from the batch's own writes, or else the store's liveIndex
// (the batch did not write key, so its view of key is the committed state).
func (w *WriteBatch) newest(key []byte) (version, bool) {
	if v, ok := w.written[string(key)]; ok {
		return v, !v.tomb
	}
	return w.s.live.get(key)
}

// put writes a new version of rec.key at (main, sub).
func (w *WriteBatch) put(rec *record) error {
	if err := w.b.Set(recordKey(rec.mod, rec.sub), encodeRecord(rec), nil); err != nil {
		return fmt.Errorf("mvcc: batch set record: %w", err)
	}
	if err := w.b.Set(idxKey(rec.key, rec.mod), idxValue(rec.sub, rec.tomb), nil); err != nil {
		return fmt.Errorf("mvcc: batch set index: %w", err)
	}
	if w.written == nil {
		w.written = make(map[string]version)
	}
	w.written[string(rec.key)] = version{main: rec.mod, sub: rec.sub, tomb: rec.tomb}
	return nil
}
