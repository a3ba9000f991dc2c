package mvcc

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// # Lease keyspace
//
//	"s/l/" | lease id (8B BE)         → granted TTL in milliseconds (8B BE)
//	"s/a/" | lease id (8B BE) | key   → empty: key's live version is attached
//
// Both are written in the same batch as the versions they describe: a put
// with a lease attaches its key (detaching it from its previous lease), a
// delete detaches it. Revoking a lease deletes every attached key in one
// revision. Expiry is not stored: the leader decides it (package raftnode)
// and revokes through the log, so every replica agrees.
var (
	leasePrefix  = []byte("s/l/")
	leaseEnd     = []byte("s/l0")
	attachPrefix = []byte("s/a/")
)

func leaseKey(id int64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte{}, leasePrefix...), uint64(id))
}

func attachKeyPrefix(id int64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte{}, attachPrefix...), uint64(id))
}

func attachKey(id int64, key []byte) []byte { return append(attachKeyPrefix(id), key...) }

func (w *WriteBatch) leaseExists(id int64) (bool, error) {
	_, closer, err := w.b.Get(leaseKey(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("mvcc: read lease: %w", err)
	}
	closer.Close()
	return true, nil
}

// reattach moves key's attachment from prev's lease to lease (0: none).
func (w *WriteBatch) reattach(key []byte, prev *record, lease int64) error {
	if prev != nil && prev.lease != 0 && prev.lease != lease {
		if err := w.b.Delete(attachKey(prev.lease, key), nil); err != nil {
			return fmt.Errorf("mvcc: detach: %w", err)
		}
	}
	if lease != 0 && (prev == nil || prev.lease != lease) {
		if err := w.b.Set(attachKey(lease, key), nil, nil); err != nil {
			return fmt.Errorf("mvcc: attach: %w", err)
		}
	}
	return nil
}

// LeaseGrant creates lease id with ttlMillis. ErrLeaseExists if it exists.
func (w *WriteBatch) LeaseGrant(id, ttlMillis int64) error {
	if id <= 0 || ttlMillis <= 0 {
		return fmt.Errorf("%w: lease id %d, ttl %dms", ErrInvalidArgument, id, ttlMillis)
	}
	ok, err := w.leaseExists(id)
	if err != nil {
		return err
	}
	if ok {
		return fmt.Errorf("%w: %d", ErrLeaseExists, id)
	}
	if err := w.b.Set(leaseKey(id), binary.BigEndian.AppendUint64(nil, uint64(ttlMillis)), nil); err != nil {
		return fmt.Errorf("mvcc: grant lease: %w", err)
	}
	return nil
}

// LeaseRevoke deletes lease id and, in one revision, every key attached to
// it. ErrLeaseNotFound if it does not exist.
func (w *WriteBatch) LeaseRevoke(id int64) (*storev1.TxnResponse, error) {
	ok, err := w.leaseExists(id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrLeaseNotFound, id)
	}
	keys, err := attachedKeys(w.b, id)
	if err != nil {
		return nil, err
	}
	req := &storev1.TxnRequest{}
	for _, k := range keys {
		req.Success = append(req.Success, &storev1.RequestOp{Request: &storev1.RequestOp_RequestDeleteRange{
			RequestDeleteRange: &storev1.DeleteRangeRequest{Key: k}}})
	}
	resp, err := w.Txn(req)
	if err != nil {
		return nil, err
	}
	if err := w.b.Delete(leaseKey(id), nil); err != nil {
		return nil, fmt.Errorf("mvcc: revoke lease: %w", err)
	}
	return resp, nil
}

type iterSource interface {
	NewIter(*pebble.IterOptions) (*pebble.Iterator, error)
}

func attachedKeys(r iterSource, id int64) ([][]byte, error) {
	p := attachKeyPrefix(id)
	end := binary.BigEndian.AppendUint64(append([]byte{}, attachPrefix...), uint64(id)+1)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: p, UpperBound: end})
	if err != nil {
		return nil, fmt.Errorf("mvcc: open attachment iterator: %w", err)
	}
	defer it.Close()
	var keys [][]byte
	for ok := it.First(); ok; ok = it.Next() {
		keys = append(keys, append([]byte{}, it.Key()[len(p):]...))
	}
	return keys, it.Error()
}

// Leases returns every lease with its granted TTL in milliseconds.
func (s *Store) Leases() (map[int64]int64, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: leasePrefix, UpperBound: leaseEnd})
	if err != nil {
		return nil, fmt.Errorf("mvcc: open lease iterator: %w", err)
	}
	defer it.Close()
	out := map[int64]int64{}
	for ok := it.First(); ok; ok = it.Next() {
		if len(it.Key()) != len(leasePrefix)+8 || len(it.Value()) != 8 {
			return nil, fmt.Errorf("%w: lease record", ErrCorrupt)
		}
		out[int64(binary.BigEndian.Uint64(it.Key()[len(leasePrefix):]))] = int64(binary.BigEndian.Uint64(it.Value()))
	}
	return out, it.Error()
}

// LeaseKeys returns the keys attached to lease id.
func (s *Store) LeaseKeys(id int64) ([][]byte, error) { return attachedKeys(s.db, id) }
