package mvcc

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// Store is the MVCC state in a pebble DB it does not own.
//
// Reads (Range, OpenHistory) are safe from any goroutine and take no lock.
// Writes go through one WriteBatch at a time (NewWriteBatch blocks while
// another is open); in the server, the raft FSM goroutine is the only
// writer.
type Store struct {
	db *pebble.DB
	// scan keeps whole-keyspace scans from growing the DB's block
	// cache (snapshot.go).
	scan scanReservation

	// wmu is held by the open WriteBatch, from NewWriteBatch to Close.
	wmu sync.Mutex
	// live is the writer's index of live keys; guarded by wmu.
	live *liveIndex

	// rev is the current revision; published after the commit that made it.
	rev atomic.Int64
	// compactRev is the compacted revision; published before the commit
	// that deletes the versions it makes unreadable.
	compactRev atomic.Int64
	// applied is the raft index of the last applied entry, persisted in the
	// same batch as the state (meta key).
	applied atomic.Uint64
}

// meta is the content of the meta key.
type meta struct {
	rev, compactRev int64
	applied         uint64
}

const metaFormatV1 = 1

func (m meta) encode() []byte {
	b := make([]byte, 0, 25)
	b = append(b, metaFormatV1)
	b = binary.BigEndian.AppendUint64(b, uint64(m.rev))
	b = binary.BigEndian.AppendUint64(b, uint64(m.compactRev))
	return binary.BigEndian.AppendUint64(b, m.applied)
}

func decodeMeta(v []byte) (meta, error) {
	if len(v) != 25 || v[0] != metaFormatV1 {
		return meta{}, fmt.Errorf("%w: meta of %d bytes", ErrCorrupt, len(v))
	}
	return meta{
		rev:        int64(binary.BigEndian.Uint64(v[1:])),
		compactRev: int64(binary.BigEndian.Uint64(v[9:])),
		applied:    binary.BigEndian.Uint64(v[17:]),
	}, nil
}

// Open loads the store's state from db. A new DB starts at revision 0. It
// does not check for an interrupted restore: callers check NeedsRestore and
// restore before serving. cache is db's block cache (its Options.Cache), which
// snapshot scans read through without growing it; nil when db has none or
// the caller does not share it: scans then fill the cache as any read does.
func Open(db *pebble.DB, cache *pebble.Cache) (*Store, error) {
	s := &Store{db: db, scan: scanReservation{cache: cache}}
	if err := s.reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// reload reads the meta key into the atomics and rebuilds the index of
// live keys.
func (s *Store) reload() error {
	li, err := loadLiveIndex(s.db)
	if err != nil {
		return err
	}
	s.live = li
	m := meta{}
	v, closer, err := s.db.Get(metaKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return fmt.Errorf("mvcc: read meta: %w", err)
	default:
		m, err = decodeMeta(v)
		closer.Close()
		if err != nil {
			return err
		}
	}
	s.rev.Store(m.rev)
	s.compactRev.Store(m.compactRev)
	s.applied.Store(m.applied)
	return nil
}

// NeedsRestore reports whether db holds an interrupted snapshot restore.
func NeedsRestore(db *pebble.DB) (bool, error) {
	_, closer, err := db.Get(restoreKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mvcc: read restore marker: %w", err)
	}
	closer.Close()
	return true, nil
}

// Rev returns the current revision.
func (s *Store) Rev() int64 { return s.rev.Load() }

// CompactRev returns the compacted revision (0 if never compacted).
func (s *Store) CompactRev() int64 { return s.compactRev.Load() }

// AppliedIndex returns the raft index of the last entry whose effects are
// committed to pebble (durable once the next synced write of the DB
// returns).
func (s *Store) AppliedIndex() uint64 { return s.applied.Load() }

// Range reads committed state. req must have passed ValidateRange: the
// store's gRPC server validates every request once, before its read
// barrier, and Range does not check again (see validate.go). The response
// header carries the revision read at and the compacted revision; the
// caller fills the rest.
func (s *Store) Range(ctx context.Context, req *storev1.RangeRequest) (*storev1.RangeResponse, error) {
	view := s.pin()
	defer view.Close()
	rev, err := checkRev(req.GetRevision(), view.rev, view.compactRev)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return rangeResponse(view.snap, req, rev, view.compactRev)
}

func rangeResponse(r reader, req *storev1.RangeRequest, rev, comp int64) (*storev1.RangeResponse, error) {
	res, err := rangeAt(r, req.GetKey(), req.GetRangeEnd(), rev, req.GetLimit(), req.GetCountOnly(), req.GetSkipCount())
	if err != nil {
		return nil, err
	}
	resp := &storev1.RangeResponse{
		Header: &storev1.ResponseHeader{Revision: rev, CompactRevision: comp},
		Count:  res.count,
		More:   res.more,
	}
	if len(res.recs) > 0 {
		resp.Kvs = make([]*storev1.KeyValue, len(res.recs))
		for i, rec := range res.recs {
			resp.Kvs[i] = rec.kv(req.GetKeysOnly())
		}
	}
	return resp, nil
}

// Sync makes every write committed so far durable (a synced, empty WAL
// record; pebble's WAL is ordered).
func (s *Store) Sync() error {
	if err := s.db.LogData([]byte("mvcc-sync"), pebble.Sync); err != nil {
		return fmt.Errorf("mvcc: sync: %w", err)
	}
	return nil
}
