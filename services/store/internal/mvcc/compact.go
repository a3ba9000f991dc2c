package mvcc

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// Compact discards history at or below rev: every version superseded by a
// newer version at or below rev is deleted, and so is every key whose newest
// version at or below rev is a delete (except a delete at exactly rev, kept
// so that a watch from rev still sees it). Reads below rev then fail with
// ErrCompacted; reads at rev or later see exactly what they saw before.
//
// Compaction is incremental: it visits only the records in
// [previous compacted revision, rev], because each version is deleted by
// its successor and every older version was handled by earlier compactions.
// Deleted records that form a run in the record keyspace are removed with
// one pebble range deletion; index entries are deleted one by one.
//
// Compacting to rev <= the compacted revision fails with *CompactedError;
// above the current revision with *FutureRevError.
func (w *WriteBatch) Compact(rev int64) (*storev1.CompactResponse, error) {
	if rev <= w.compactRev {
		return nil, &CompactedError{CompactRev: w.compactRev, Requested: rev}
	}
	if rev > w.rev {
		return nil, &FutureRevError{CurrentRev: w.rev, Requested: rev}
	}
	if err := w.compact(max(w.compactRev, 1), rev); err != nil {
		return nil, err
	}
	w.compactRev = rev
	return &storev1.CompactResponse{Header: &storev1.ResponseHeader{Revision: w.rev, CompactRevision: rev}}, nil
}

type recRef struct {
	main int64
	sub  uint32
}

func (r recRef) key() []byte { return recordKey(r.main, r.sub) }

func (w *WriteBatch) compact(from, to int64) error {
	it, err := w.b.NewIter(&pebble.IterOptions{LowerBound: recordKey(from, 0), UpperBound: recordKey(to+1, 0)})
	if err != nil {
		return fmt.Errorf("mvcc: open iterator: %w", err)
	}
	defer it.Close()

	// Pass 1: decide. Reads see the batch as it was before this compaction
	// (nothing is deleted until pass 2), which is what the rules need: the
	// newest version below a record is its predecessor.
	var visited []recRef
	deleted := make(map[recRef]struct{})
	var older []recRef // deleted records below from
	var idxDeletes [][]byte
	for ok := it.First(); ok; ok = it.Next() {
		main, sub, err := parseRecordKey(it.Key())
		if err != nil {
			return err
		}
		key, tomb, err := decodeRecordKey(it.Value())
		if err != nil {
			return err
		}
		cur := recRef{main, sub}
		visited = append(visited, cur)
		if pv, ok, err := versionAt(w.b, key, main-1); err != nil {
			return err
		} else if ok {
			ref := recRef{pv.main, pv.sub}
			deleted[ref] = struct{}{}
			if pv.main < from {
				older = append(older, ref)
			}
			idxDeletes = append(idxDeletes, idxKey(key, pv.main))
		}
		if tomb && main < to {
			nv, ok, err := versionAt(w.b, key, to)
			if err != nil {
				return err
			}
			if ok && nv.main == main {
				deleted[cur] = struct{}{}
				idxDeletes = append(idxDeletes, idxKey(key, main))
			}
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("mvcc: compaction scan: %w", err)
	}

	// Pass 2: delete, coalescing runs of deleted visited records.
	for i := 0; i < len(visited); {
		if _, ok := deleted[visited[i]]; !ok {
			i++
			continue
		}
		j := i + 1
		for j < len(visited) {
			if _, ok := deleted[visited[j]]; !ok {
				break
			}
			j++
		}
		var err error
		if j-i == 1 {
			err = w.b.Delete(visited[i].key(), nil)
		} else {
			last := visited[j-1]
			err = w.b.DeleteRange(visited[i].key(), recordKey(last.main, last.sub+1), nil)
		}
		if err != nil {
			return fmt.Errorf("mvcc: compaction delete: %w", err)
		}
		i = j
	}
	slices.SortFunc(older, func(a, b recRef) int { return bytes.Compare(a.key(), b.key()) })
	for _, r := range older {
		if err := w.b.Delete(r.key(), nil); err != nil {
			return fmt.Errorf("mvcc: compaction delete: %w", err)
		}
	}
	for _, k := range idxDeletes {
		if err := w.b.Delete(k, nil); err != nil {
			return fmt.Errorf("mvcc: compaction delete: %w", err)
		}
	}
	return nil
}
