package mvcc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// Snapshot stream format: the magic, then every key of the keyspace in
// order as (uvarint key length, key, uvarint value length, value), then a
// zero key length.
var snapshotMagic = []byte("meridian-mvcc-snapshot-v1\n")

// restoreChunkBytes bounds the size of each restore batch.
const restoreChunkBytes = 4 << 20

// scanSlack is the room in the block cache a whole-keyspace scan reads
// through, beyond what the cache held when the first scan began: enough
// blocks in every shard for the iterator's levels.
const scanSlack = 1 << 20

// Snapshot pins the current state for WriteSnapshot. Release it with
// Close.
type Snapshot struct {
	snap *pebble.Snapshot
	scan *scanReservation
}

// NewSnapshot pins the current committed state.
func (s *Store) NewSnapshot() *Snapshot {
	return &Snapshot{snap: s.db.NewSnapshot(), scan: &s.scan}
}

// scanReservation keeps the scans of WriteTo (raft snapshots, backups)
// from growing the block cache: a scan reads every block of the keyspace
// once, and without it would leave the cache full of them (as much as
// the whole store, up to the cache's capacity) although no reader asked
// for them. While scans run, the cache's capacity free when the first
// began, less scanSlack, is reserved (pebble.Cache.Reserve): the scan's
// blocks then take the place of the cache's coldest blocks and of each
// other, and the blocks readers use again (hot in the cache's CLOCK-Pro)
// stay. A cache already full is not changed. The reservation is spread
// evenly over the cache's shards, so a shard fuller than the average
// drops its coldest blocks down to its share when the scan begins.
type scanReservation struct {
	cache *pebble.Cache
	mu    sync.Mutex
	// scans is how many scans are running; release ends the reservation
	// the first of them made. Both guarded by mu.
	scans   int
	release func()
}

// begin reserves the cache's free capacity, less scanSlack, when no
// other scan is running.
func (r *scanReservation) begin() {
	if r == nil || r.cache == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.scans++
	if r.scans > 1 {
		return
	}
	if free := r.cache.MaxSize() - r.cache.Size() - scanSlack; free > 0 {
		r.release = r.cache.Reserve(int(free))
	}
}

// end releases the reservation when the last running scan ends.
func (r *scanReservation) end() {
	if r == nil || r.cache == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.scans--
	if r.scans == 0 && r.release != nil {
		r.release()
		r.release = nil
	}
}

// Close releases the snapshot.
func (sn *Snapshot) Close() { _ = sn.snap.Close() }

// WriteTo streams the keyspace to w. It does not grow the block cache
// (scanReservation).
func (sn *Snapshot) WriteTo(w io.Writer) (int64, error) {
	sn.scan.begin()
	defer sn.scan.end()
	bw := bufio.NewWriterSize(w, 1<<20)
	cw := &countWriter{w: bw}
	it, err := sn.snap.NewIter(&pebble.IterOptions{LowerBound: KeyspaceStart, UpperBound: KeyspaceEnd})
	if err != nil {
		return 0, fmt.Errorf("mvcc: open iterator: %w", err)
	}
	defer it.Close()
	if _, err := cw.Write(snapshotMagic); err != nil {
		return cw.n, err
	}
	var hdr []byte
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return cw.n, fmt.Errorf("mvcc: snapshot read: %w", err)
		}
		hdr = binary.AppendUvarint(hdr[:0], uint64(len(it.Key())))
		hdr = append(hdr, it.Key()...)
		hdr = binary.AppendUvarint(hdr, uint64(len(v)))
		if _, err := cw.Write(hdr); err != nil {
			return cw.n, err
		}
		if _, err := cw.Write(v); err != nil {
			return cw.n, err
		}
	}
	if err := it.Error(); err != nil {
		return cw.n, fmt.Errorf("mvcc: snapshot scan: %w", err)
	}
	if _, err := cw.Write([]byte{0}); err != nil {
		return cw.n, err
	}
	return cw.n, bw.Flush()
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Restore replaces the whole keyspace with a snapshot stream written by
// Snapshot.WriteTo, then reloads the revisions and applied index.
//
// A marker key, set with a synced write before anything is deleted and
// removed by the final synced batch, makes an interrupted restore visible:
// Open and NeedsRestore report it, and the caller must restore again (raft
// can, from its snapshot store) before serving.
func (s *Store) Restore(r io.Reader) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	br := bufio.NewReaderSize(r, 1<<20)
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != string(snapshotMagic) {
		return fmt.Errorf("%w: not a meridian mvcc snapshot", ErrCorrupt)
	}
	if err := s.db.Set(restoreKey, []byte{1}, pebble.Sync); err != nil {
		return fmt.Errorf("mvcc: set restore marker: %w", err)
	}
	b := s.db.NewBatch()
	if err := b.DeleteRange(KeyspaceStart, KeyspaceEnd, nil); err != nil {
		b.Close()
		return fmt.Errorf("mvcc: restore clear: %w", err)
	}
	for {
		k, err := readChunk(br)
		if err != nil {
			b.Close()
			return err
		}
		if len(k) == 0 {
			break
		}
		v, err := readChunk(br)
		if err != nil {
			b.Close()
			return err
		}
		if err := b.Set(k, v, nil); err != nil {
			b.Close()
			return fmt.Errorf("mvcc: restore set: %w", err)
		}
		if b.Len() >= restoreChunkBytes {
			if err := b.Commit(pebble.NoSync); err != nil {
				b.Close()
				return fmt.Errorf("mvcc: restore commit: %w", err)
			}
			b.Close()
			b = s.db.NewBatch()
		}
	}
	defer b.Close()
	if err := b.Delete(restoreKey, nil); err != nil {
		return fmt.Errorf("mvcc: restore marker: %w", err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("mvcc: restore commit: %w", err)
	}
	// The restored state may be older than the published revisions; store
	// them unconditionally.
	return s.reload()
}

func readChunk(r *bufio.Reader) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot truncated: %v", ErrCorrupt, err)
	}
	if n == 0 {
		return nil, nil
	}
	if n > 1<<31 {
		return nil, fmt.Errorf("%w: snapshot chunk of %d bytes", ErrCorrupt, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("%w: snapshot truncated: %v", ErrCorrupt, err)
	}
	return b, nil
}
