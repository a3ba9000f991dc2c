package mvcc

import (
	"context"
	"fmt"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/wire"
)

// ReadTxn evaluates a transaction that only reads (wire.TxnWrites false)
// against one snapshot of the committed state, as etcd serves read-only
// transactions: its compares and ranges all see the same revision, the
// current one unless a range names an older one. The caller makes it
// linearizable (a read barrier first), as for Range. It moves no revision
// and writes nothing, so it needs no raft entry. req must have passed
// ValidateTxn, as for Range (see validate.go); a transaction that writes
// is refused with ErrInvalidOp.
func (s *Store) ReadTxn(ctx context.Context, req *storev1.TxnRequest) (*storev1.TxnResponse, error) {
	if wire.TxnWrites(req) {
		return nil, fmt.Errorf("%w: ReadTxn of a transaction that writes", ErrInvalidOp)
	}
	view := s.pin()
	defer view.Close()
	snap, cur, comp := view.snap, view.rev, view.compactRev
	ok, ops, err := branch(req, func(c *storev1.Compare) (bool, error) { return compareAt(snap, c, cur) })
	if err != nil {
		return nil, err
	}
	resp := &storev1.TxnResponse{Succeeded: ok, Responses: make([]*storev1.ResponseOp, 0, len(ops))}
	for _, op := range ops {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r := op.GetRequestRange()
		rev, err := checkRev(r.GetRevision(), cur, comp)
		if err != nil {
			return nil, err
		}
		rr, err := rangeResponse(snap, r, rev, comp)
		if err != nil {
			return nil, err
		}
		resp.Responses = append(resp.Responses, &storev1.ResponseOp{Response: &storev1.ResponseOp_ResponseRange{ResponseRange: rr}})
	}
	resp.Header = &storev1.ResponseHeader{Revision: cur, CompactRevision: comp}
	return resp, nil
}
