// Package raftlog implements hashicorp/raft's StableStore (current term,
// last vote) on pebble, and the LogStore that held the raft log in pebble
// until it moved to its own segments (package raftwal): the store keeps
// reading it so that an older data directory's entries can be moved
// (raftwal.Migrate).
//
// # Layout
//
// The store owns two key prefixes of a pebble DB it does not own (the DB is
// shared with the state machine, see package fsm):
//
//	"r/l/" <index 8B big-endian>  → encoded raft.Log (see EncodeLog)
//	"r/s/" <stable key bytes>     → stable value (current term, last vote…)
//
// Big-endian indexes make pebble's key order the log order, so FirstIndex
// and LastIndex are the first and last keys of the "r/l/" prefix.
//
// # Durability
//
// Every write (StoreLogs, DeleteRange, Set, SetUint64) commits with
// pebble.Sync: when it returns, the entry and every earlier pebble write of
// the same DB are on stable storage, because pebble's WAL is one ordered
// log.
//
// # Concurrency
//
// Methods are safe for concurrent use. first and last index are cached in
// atomics, updated under mu after the write that changes them committed.
package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
)

// ErrKeyNotFound is returned by the stable store for a missing key. Its text
// is exactly "not found" because hashicorp/raft compares error strings.
var ErrKeyNotFound = errors.New("not found")

var (
	logPrefix    = []byte("r/l/")
	stablePrefix = []byte("r/s/")
)

// Store is a raft.LogStore, raft.StableStore and raft.MonotonicLogStore
// backed by pebble.
type Store struct {
	db *pebble.DB
	// observe, when non-nil, receives the duration of each synced commit.
	observe func(time.Duration)

	// mu serialises writers so the cached indexes move with the data.
	mu    sync.Mutex
	first atomic.Uint64
	last  atomic.Uint64
}

var (
	_ raft.LogStore          = (*Store)(nil)
	_ raft.StableStore       = (*Store)(nil)
	_ raft.MonotonicLogStore = (*Store)(nil)
)

// New returns a store over db, reading the current first and last index.
// observeSync, if non-nil, is called with the duration of every synced
// commit (for metrics). The caller keeps ownership of db and must close it
// after raft has shut down.
func New(db *pebble.DB, observeSync func(time.Duration)) (*Store, error) {
	s := &Store{db: db, observe: observeSync}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: logPrefix, UpperBound: prefixEnd(logPrefix)})
	if err != nil {
		return nil, fmt.Errorf("raftlog: open iterator: %w", err)
	}
	defer it.Close()
	if it.First() {
		s.first.Store(indexOf(it.Key()))
	}
	if it.Last() {
		s.last.Store(indexOf(it.Key()))
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("raftlog: read bounds: %w", err)
	}
	return s, nil
}

// IsMonotonic reports that the store never holds gaps: after a snapshot
// restore raft deletes the whole log instead of leaving a gap.
func (s *Store) IsMonotonic() bool { return true }

// FirstIndex returns the first index written, 0 for an empty log.
func (s *Store) FirstIndex() (uint64, error) { return s.first.Load(), nil }

// LastIndex returns the last index written, 0 for an empty log.
func (s *Store) LastIndex() (uint64, error) { return s.last.Load(), nil }

// GetLog reads the entry at index into out; raft.ErrLogNotFound if absent.
func (s *Store) GetLog(index uint64, out *raft.Log) error {
	v, closer, err := s.db.Get(logKey(index))
	if errors.Is(err, pebble.ErrNotFound) {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return fmt.Errorf("raftlog: get %d: %w", index, err)
	}
	defer closer.Close()
	if err := DecodeLog(v, out); err != nil {
		return fmt.Errorf("raftlog: decode %d: %w", index, err)
	}
	out.Index = index
	return nil
}

// StoreLog stores one entry.
func (s *Store) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs stores entries in one synced pebble batch.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	b := s.db.NewBatch()
	defer b.Close()
	var buf []byte
	lo, hi := logs[0].Index, logs[0].Index
	for _, l := range logs {
		buf = EncodeLog(buf[:0], l)
		if err := b.Set(logKey(l.Index), buf, nil); err != nil {
			return fmt.Errorf("raftlog: batch set: %w", err)
		}
		lo, hi = min(lo, l.Index), max(hi, l.Index)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.commit(b); err != nil {
		return err
	}
	if f := s.first.Load(); f == 0 || lo < f {
		s.first.Store(lo)
	}
	if hi > s.last.Load() {
		s.last.Store(hi)
	}
	return nil
}

// DeleteRange deletes entries [lo, hi], inclusive, with one range deletion.
func (s *Store) DeleteRange(lo, hi uint64) error {
	b := s.db.NewBatch()
	defer b.Close()
	end := logKey(hi + 1)
	if hi == ^uint64(0) {
		end = prefixEnd(logPrefix)
	}
	if err := b.DeleteRange(logKey(lo), end, nil); err != nil {
		return fmt.Errorf("raftlog: batch delete range: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.commit(b); err != nil {
		return err
	}
	// Recompute the bounds from the data: deletes may cut either end or
	// the whole log.
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: logPrefix, UpperBound: prefixEnd(logPrefix)})
	if err != nil {
		return fmt.Errorf("raftlog: open iterator: %w", err)
	}
	defer it.Close()
	first, last := uint64(0), uint64(0)
	if it.First() {
		first = indexOf(it.Key())
	}
	if it.Last() {
		last = indexOf(it.Key())
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("raftlog: read bounds: %w", err)
	}
	s.first.Store(first)
	s.last.Store(last)
	return nil
}

// Set stores a stable value.
func (s *Store) Set(key, val []byte) error {
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.Set(stableKey(key), val, nil); err != nil {
		return fmt.Errorf("raftlog: batch set: %w", err)
	}
	return s.commit(b)
}

// Get returns a stable value, or ErrKeyNotFound.
func (s *Store) Get(key []byte) ([]byte, error) {
	v, closer, err := s.db.Get(stableKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrKeyNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("raftlog: get stable: %w", err)
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

// SetUint64 stores a stable uint64 (8 bytes big-endian).
func (s *Store) SetUint64(key []byte, val uint64) error {
	return s.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// GetUint64 returns a stable uint64, or 0 and ErrKeyNotFound.
func (s *Store) GetUint64(key []byte) (uint64, error) {
	v, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(v) != 8 {
		return 0, fmt.Errorf("raftlog: stable key %q holds %d bytes, not a uint64", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

func (s *Store) commit(b *pebble.Batch) error {
	start := time.Now()
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("raftlog: commit: %w", err)
	}
	if s.observe != nil {
		s.observe(time.Since(start))
	}
	return nil
}

func logKey(index uint64) []byte {
	return binary.BigEndian.AppendUint64(append(make([]byte, 0, len(logPrefix)+8), logPrefix...), index)
}

func indexOf(key []byte) uint64 { return binary.BigEndian.Uint64(key[len(logPrefix):]) }

func stableKey(key []byte) []byte { return append(append([]byte(nil), stablePrefix...), key...) }

// prefixEnd returns the smallest key greater than every key with prefix p
// (p must not end in 0xff).
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	end[len(end)-1]++
	return end
}
