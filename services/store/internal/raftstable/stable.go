// Package raftstable keeps hashicorp/raft's StableStore (current term, last
// vote) in the pebble DB it shares with the state machine, and reads the
// legacy raft log a data directory may still hold in that DB, so that
// raftwal.Migrate can move it into segments.
//
// # Layout
//
// The package owns two key prefixes of a pebble DB it does not own (the DB
// is shared with the state machine, see package mvcc):
//
//	"r/s/" <stable key bytes>     → stable value (current term, last vote…)
//	"r/l/" <index 8B big-endian>  → legacy log entry (raftwal.EncodeLog)
//
// Big-endian indexes make pebble's key order the log order, so the legacy
// log's first and last index are the first and last keys of "r/l/".
//
// # Durability
//
// Every write (Set, SetUint64, and the legacy log's StoreLogs and
// DeleteRange) commits with pebble.Sync: when it returns, the value and
// every earlier pebble write of the same DB are on stable storage, because
// pebble's WAL is one ordered log.
//
// # Concurrency
//
// Methods of both types are safe for concurrent use.
package raftstable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
)

// ErrKeyNotFound is returned by the stable store for a missing key. Its text
// is exactly "not found" because hashicorp/raft compares error strings.
var ErrKeyNotFound = errors.New("not found")

var stablePrefix = []byte("r/s/")

// Store is a raft.StableStore backed by pebble.
type Store struct {
	db *pebble.DB
	// observe, when non-nil, receives the duration of each synced commit.
	observe func(time.Duration)
}

var _ raft.StableStore = (*Store)(nil)

// New returns a stable store over db. observeSync, if non-nil, is called
// with the duration of every synced commit (for metrics). The caller keeps
// ownership of db and must close it after raft has shut down.
func New(db *pebble.DB, observeSync func(time.Duration)) *Store {
	return &Store{db: db, observe: observeSync}
}

// Set stores a stable value.
func (s *Store) Set(key, val []byte) error {
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.Set(stableKey(key), val, nil); err != nil {
		return fmt.Errorf("raftstable: batch set: %w", err)
	}
	return commitSync(b, s.observe)
}

// Get returns a stable value, or ErrKeyNotFound.
func (s *Store) Get(key []byte) ([]byte, error) {
	v, closer, err := s.db.Get(stableKey(key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrKeyNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("raftstable: get stable: %w", err)
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
		return 0, fmt.Errorf("raftstable: stable key %q holds %d bytes, not a uint64", key, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

// commitSync commits b with pebble.Sync and reports its duration to
// observe, if set.
func commitSync(b *pebble.Batch, observe func(time.Duration)) error {
	start := time.Now()
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("raftstable: commit: %w", err)
	}
	if observe != nil {
		observe(time.Since(start))
	}
	return nil
}

func stableKey(key []byte) []byte { return append(append([]byte(nil), stablePrefix...), key...) }
