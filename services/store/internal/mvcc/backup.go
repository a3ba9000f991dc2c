package mvcc

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"
)

// # Backups
//
// A backup (MaintenanceService.Snapshot, `store snapshot save`) is the
// snapshot stream that raft snapshots use (Snapshot.WriteTo), followed by
// the SHA-256 of that stream:
//
//	+------------------------------------------+------------------+
//	| snapshot stream (magic, entries, 0x00)   | SHA-256 (32 B)   |
//	+------------------------------------------+------------------+
//
// Store.Restore reads the stream and stops at its end marker, so a backup
// can be restored like a raft snapshot; VerifyBackup checks the trailer
// first.

// BackupChecksumSize is the size of a backup's trailer.
const BackupChecksumSize = sha256.Size

// WriteBackup writes the snapshot stream followed by its SHA-256.
func (sn *Snapshot) WriteBackup(w io.Writer) (int64, error) {
	h := sha256.New()
	n, err := sn.WriteTo(io.MultiWriter(w, h))
	if err != nil {
		return n, err
	}
	m, err := w.Write(h.Sum(nil))
	return n + int64(m), err
}

// Revisions returns the current and compacted revisions of the pinned
// state (its meta key); zeros for an empty store.
func (sn *Snapshot) Revisions() (rev, compactRev int64, err error) {
	v, closer, err := sn.snap.Get(metaKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("mvcc: read meta: %w", err)
	}
	defer closer.Close()
	m, err := decodeMeta(v)
	if err != nil {
		return 0, 0, err
	}
	return m.rev, m.compactRev, nil
}

// VerifyBackup reads a backup of size bytes from r and checks that it ends
// with the SHA-256 of the rest and starts like a snapshot stream. It
// returns an error wrapping ErrCorrupt otherwise.
func VerifyBackup(r io.Reader, size int64) error {
	if size < int64(len(snapshotMagic))+1+BackupChecksumSize {
		return fmt.Errorf("%w: backup of %d bytes is too short", ErrCorrupt, size)
	}
	h := sha256.New()
	head := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(io.TeeReader(r, h), head); err != nil {
		return fmt.Errorf("mvcc: read backup: %w", err)
	}
	if !bytes.Equal(head, snapshotMagic) {
		return fmt.Errorf("%w: not a meridian store backup", ErrCorrupt)
	}
	if _, err := io.CopyN(h, r, size-BackupChecksumSize-int64(len(head))); err != nil {
		return fmt.Errorf("mvcc: read backup: %w", err)
	}
	sum := make([]byte, BackupChecksumSize)
	if _, err := io.ReadFull(r, sum); err != nil {
		return fmt.Errorf("mvcc: read backup checksum: %w", err)
	}
	if !bytes.Equal(sum, h.Sum(nil)) {
		return fmt.Errorf("%w: backup checksum mismatch (truncated or damaged file)", ErrCorrupt)
	}
	return nil
}

// ResetForNewCluster prepares a state restored from another raft group's
// snapshot for a new group: the applied index goes back to 0, because the
// new group's log starts at index 1 and entries at or below the applied
// index are never applied, and the membership keyspace (client addresses
// of the old group's members) is cleared. Revisions, keys, history and
// leases are kept. The change is synced.
func (s *Store) ResetForNewCluster() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(memberPrefix, memberEnd, nil); err != nil {
		return fmt.Errorf("mvcc: clear members: %w", err)
	}
	m := meta{rev: s.rev.Load(), compactRev: s.compactRev.Load()}
	if err := b.Set(metaKey, m.encode(), nil); err != nil {
		return fmt.Errorf("mvcc: set meta: %w", err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("mvcc: commit: %w", err)
	}
	s.applied.Store(0)
	return nil
}
