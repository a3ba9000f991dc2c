package mvcc

import (
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// History is a consistent, point-in-time view of the event history, for
// watch catch-up. It pins a pebble snapshot: Close it promptly.
type History struct {
	snap       *pebble.Snapshot
	rev        int64
	compactRev int64
}

// OpenHistory pins the current state. Every event at or below Rev() is in
// the view; events at or above CompactRev() are complete.
func (s *Store) OpenHistory() *History {
	h := s.pin()
	return &h
}

// pin loads the revision, the snapshot and the compacted revision in the
// order that makes them agree; Range, ReadTxn and OpenHistory read through
// it. It returns a value so that a read's view stays off the heap.
func (s *Store) pin() History {
	rev := s.rev.Load() // before the snapshot: see "Publication order"
	snap := s.db.NewSnapshot()
	return History{snap: snap, rev: rev, compactRev: s.compactRev.Load()} // after the snapshot
}

// Rev returns the current revision of the view.
func (h *History) Rev() int64 { return h.rev }

// CompactRev returns the compacted revision of the view.
func (h *History) CompactRev() int64 { return h.compactRev }

// Close releases the snapshot.
func (h *History) Close() { _ = h.snap.Close() }

// Events calls fn, in revision order, with every event in [from, to] on a
// key in [key, end) (RangeRequest conventions). With prevKV, each event
// carries the key's previous version when it existed and is still stored
// (the previous version of an event at exactly the compacted revision is
// not). It fails with *CompactedError if from < CompactRev().
func (h *History) Events(ctx context.Context, from, to int64, key, end []byte, prevKV bool, fn func(*storev1.Event) error) error {
	if from < h.compactRev {
		return &CompactedError{CompactRev: h.compactRev, Requested: from}
	}
	if from > to {
		return nil
	}
	it, err := h.snap.NewIter(&pebble.IterOptions{LowerBound: recordKey(from, 0), UpperBound: recordKey(to+1, 0)})
	if err != nil {
		return fmt.Errorf("mvcc: open iterator: %w", err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		main, sub, err := parseRecordKey(it.Key())
		if err != nil {
			return err
		}
		k, _, err := decodeRecordKey(it.Value())
		if err != nil {
			return err
		}
		if !inRange(k, key, end) {
			continue
		}
		rec, err := decodeRecord(main, sub, it.Value())
		if err != nil {
			return err
		}
		ev := rec.event()
		if prevKV {
			prev, err := liveAt(h.snap, rec.key, main-1)
			if err != nil {
				return err
			}
			if prev != nil {
				ev.PrevKv = prev.kv(false)
			}
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("mvcc: history scan: %w", err)
	}
	return nil
}
