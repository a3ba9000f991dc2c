package server

import (
	"google.golang.org/grpc"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// snapshotChunkBytes is the size of each SnapshotResponse blob (the last
// may be shorter).
const snapshotChunkBytes = 1 << 20

// Snapshot streams a backup of this member's applied state (mvcc's backup
// format: the raft snapshot stream, then its SHA-256) in chunks. The state
// is pinned once, so the copy is consistent: header.revision and
// header.compact_revision are the pinned state's, on every chunk.
// remaining_bytes is not known and left 0.
//
// It is served by the member asked, from its local state, without a read
// barrier: a backup must be possible from a surviving member of a cluster
// that lost its quorum. header.revision tells how recent it is; ask the
// leader for the newest state.
func (m *maintenanceServer) Snapshot(_ *storev1.SnapshotRequest, stream grpc.ServerStreamingServer[storev1.SnapshotResponse]) error {
	snap := m.s.cfg.KV.NewSnapshot()
	defer snap.Close()
	rev, compactRev, err := snap.Revisions()
	if err != nil {
		return toStatus(err)
	}
	h := m.s.header(rev)
	h.CompactRevision = compactRev
	w := &chunkWriter{size: snapshotChunkBytes, send: func(b []byte) error {
		return stream.Send(&storev1.SnapshotResponse{Header: h, Blob: b})
	}}
	n, err := snap.WriteBackup(w)
	if err == nil {
		err = w.flush()
	}
	if err != nil {
		m.s.cfg.Logger.Warn("snapshot stream failed", "revision", rev, "bytes", n, "error", err)
		return toStatus(err)
	}
	m.s.cfg.Logger.Info("snapshot sent", "revision", rev, "bytes", n)
	return nil
}

// chunkWriter cuts what is written into messages of size bytes. Each
// message gets a fresh buffer: gRPC may read a sent message lazily.
type chunkWriter struct {
	size int
	buf  []byte
	send func([]byte) error
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if c.buf == nil {
			c.buf = make([]byte, 0, c.size)
		}
		k := min(c.size-len(c.buf), len(p))
		c.buf = append(c.buf, p[:k]...)
		p, n = p[k:], n+k
		if len(c.buf) == c.size {
			if err := c.flush(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// flush sends what is buffered.
func (c *chunkWriter) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	b := c.buf
	c.buf = nil
	return c.send(b)
}
