package raftstable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"

	"github.com/meridian-cp/meridian/services/store/internal/raftwal"
)

var logPrefix = []byte("r/l/")

// LegacyLog is the raft log kept in pebble under "r/l/", as data
// directories of earlier releases hold it: a raft.LogStore and
// raft.MonotonicLogStore. Raft itself uses package raftwal's segments;
// the node reads a LegacyLog only so that raftwal.Migrate can move what it
// holds (and tests write one to build such a data directory).
type LegacyLog struct {
	db *pebble.DB
	// observe, when non-nil, receives the duration of each synced commit.
	observe func(time.Duration)

	// mu serialises writers so the cached indexes move with the data;
	// first and last are updated under mu after the write that changes
	// them committed.
	mu    sync.Mutex
	first atomic.Uint64
	last  atomic.Uint64
}

var (
	_ raft.LogStore          = (*LegacyLog)(nil)
	_ raft.MonotonicLogStore = (*LegacyLog)(nil)
)

// OpenLegacyLog returns the legacy log in db, reading its first and last
// index. observeSync, if non-nil, is called with the duration of every
// synced commit. The caller keeps ownership of db.
func OpenLegacyLog(db *pebble.DB, observeSync func(time.Duration)) (*LegacyLog, error) {
	l := &LegacyLog{db: db, observe: observeSync}
	first, last, err := l.bounds()
	if err != nil {
		return nil, err
	}
	l.first.Store(first)
	l.last.Store(last)
	return l, nil
}

// bounds reads the first and last index from the data (0, 0 when empty).
func (l *LegacyLog) bounds() (first, last uint64, err error) {
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: logPrefix, UpperBound: prefixEnd(logPrefix)})
	if err != nil {
		return 0, 0, fmt.Errorf("raftstable: open iterator: %w", err)
	}
	defer it.Close()
	if it.First() {
		first = indexOf(it.Key())
	}
	if it.Last() {
		last = indexOf(it.Key())
	}
	if err := it.Error(); err != nil {
		return 0, 0, fmt.Errorf("raftstable: read bounds: %w", err)
	}
	return first, last, nil
}

// IsMonotonic reports that the log never holds gaps: after a snapshot
// restore raft deletes the whole log instead of leaving a gap.
func (l *LegacyLog) IsMonotonic() bool { return true }

// FirstIndex returns the first index written, 0 for an empty log.
func (l *LegacyLog) FirstIndex() (uint64, error) { return l.first.Load(), nil }

// LastIndex returns the last index written, 0 for an empty log.
func (l *LegacyLog) LastIndex() (uint64, error) { return l.last.Load(), nil }

// GetLog reads the entry at index into out; raft.ErrLogNotFound if absent.
func (l *LegacyLog) GetLog(index uint64, out *raft.Log) error {
	v, closer, err := l.db.Get(logKey(index))
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return fmt.Errorf("raftstable: get %d: %w", index, err)
	}
	defer closer.Close()
	if err := raftwal.DecodeLog(v, out); err != nil {
		return fmt.Errorf("raftstable: decode %d: %w", index, err)
	}
	out.Index = index
	return nil
}

// StoreLog stores one entry.
func (l *LegacyLog) StoreLog(e *raft.Log) error { return l.StoreLogs([]*raft.Log{e}) }

// StoreLogs stores entries in one synced pebble batch.
func (l *LegacyLog) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	b := l.db.NewBatch()
	defer b.Close()
	var buf []byte
	lo, hi := logs[0].Index, logs[0].Index
	for _, e := range logs {
		buf = raftwal.EncodeLog(buf[:0], e)
		if err := b.Set(logKey(e.Index), buf, nil); err != nil {
			return fmt.Errorf("raftstable: batch set: %w", err)
		}
		lo, hi = min(lo, e.Index), max(hi, e.Index)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := commitSync(b, l.observe); err != nil {
		return err
	}
	if f := l.first.Load(); f == 0 || lo < f {
		l.first.Store(lo)
	}
	if hi > l.last.Load() {
		l.last.Store(hi)
	}
	return nil
}

// DeleteRange deletes entries [lo, hi], inclusive, with one range deletion.
func (l *LegacyLog) DeleteRange(lo, hi uint64) error {
	b := l.db.NewBatch()
	defer b.Close()
	end := logKey(hi + 1)
	if hi == ^uint64(0) {
		end = prefixEnd(logPrefix)
	}
	if err := b.DeleteRange(logKey(lo), end, nil); err != nil {
		return fmt.Errorf("raftstable: batch delete range: %w", err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := commitSync(b, l.observe); err != nil {
		return err
	}
	// Recompute the bounds from the data: deletes may cut either end or
	// the whole log.
	first, last, err := l.bounds()
	if err != nil {
		return err
	}
	l.first.Store(first)
	l.last.Store(last)
	return nil
}

func logKey(index uint64) []byte {
	return binary.BigEndian.AppendUint64(append(make([]byte, 0, len(logPrefix)+8), logPrefix...), index)
}

func indexOf(key []byte) uint64 { return binary.BigEndian.Uint64(key[len(logPrefix):]) }

// prefixEnd returns the smallest key greater than every key with prefix p
// (p must not end in 0xff).
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	end[len(end)-1]++
	return end
}
