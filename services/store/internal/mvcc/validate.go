package mvcc

import (
	"bytes"
	"fmt"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// Where requests are validated.
//
// Validation is structural and deterministic: it depends only on the
// request. The store's gRPC server (package server) is the boundary that
// owns it: it validates every Range and Txn once, with ValidateRange and
// ValidateTxn, before any read barrier, forwarding or proposal, so bad
// input is refused with INVALID_ARGUMENT whatever the state of raft, and
// costs no barrier and no log entry. The read methods below it (Range,
// ReadTxn) take validated requests and do not check again.
//
// Applying a raft entry (WriteBatch.Txn) validates the transaction again:
// that is the replicated log's boundary, not the API's. Every replica
// applies the entry, whoever proposed it, and reaches the same verdict
// because the check depends only on the entry.
//
// Per-node limits (value size, request size) are checked by
// Limits.CheckTxnLimits at the API boundary only, before proposing: they
// may differ between members, so they must never decide an apply.
//
// Watch creation is validated by the watch hub (watch.Hub.Watch), the one
// path to a watcher, with ValidateWatch.

// validKeyRange checks a key/range_end pair with the RangeRequest
// conventions.
func validKeyRange(key, end []byte) error {
	if len(key) == 0 && !(len(end) == 1 && end[0] == 0) {
		return ErrEmptyKey
	}
	if len(end) == 0 || (len(end) == 1 && end[0] == 0) {
		return nil
	}
	if bytes.Compare(end, key) <= 0 {
		return ErrInvalidRange
	}
	return nil
}

// ValidateRange checks a RangeRequest.
func ValidateRange(req *storev1.RangeRequest) error {
	if err := validKeyRange(req.GetKey(), req.GetRangeEnd()); err != nil {
		return err
	}
	if req.GetLimit() < 0 || req.GetRevision() < 0 {
		return fmt.Errorf("%w: negative limit or revision", ErrInvalidOp)
	}
	return nil
}

// ValidateWatch checks a WatchCreateRequest.
func ValidateWatch(req *storev1.WatchCreateRequest) error {
	if err := validKeyRange(req.GetKey(), req.GetRangeEnd()); err != nil {
		return err
	}
	if req.GetStartRevision() < 0 {
		return fmt.Errorf("%w: negative start_revision", ErrInvalidOp)
	}
	return nil
}

// ValidateTxn checks a TxnRequest's structure.
func ValidateTxn(req *storev1.TxnRequest) error {
	for _, c := range req.GetCompare() {
		if err := validateCompare(c); err != nil {
			return err
		}
	}
	if err := validateOps(req.GetSuccess()); err != nil {
		return err
	}
	return validateOps(req.GetFailure())
}

func validateCompare(c *storev1.Compare) error {
	if c == nil {
		return ErrInvalidCompare
	}
	if err := validKeyRange(c.GetKey(), c.GetRangeEnd()); err != nil {
		return err
	}
	if c.GetResult() < storev1.Compare_RESULT_EQUAL || c.GetResult() > storev1.Compare_RESULT_NOT_EQUAL {
		return fmt.Errorf("%w: result %v", ErrInvalidCompare, c.GetResult())
	}
	var ok bool
	switch c.GetTargetUnion().(type) {
	case nil:
		ok = true // the operand is the zero value of the target
	case *storev1.Compare_Version:
		ok = c.GetTarget() == storev1.Compare_TARGET_VERSION
	case *storev1.Compare_CreateRevision:
		ok = c.GetTarget() == storev1.Compare_TARGET_CREATE
	case *storev1.Compare_ModRevision:
		ok = c.GetTarget() == storev1.Compare_TARGET_MOD
	case *storev1.Compare_Value:
		ok = c.GetTarget() == storev1.Compare_TARGET_VALUE
	case *storev1.Compare_Lease:
		ok = c.GetTarget() == storev1.Compare_TARGET_LEASE
	}
	if !ok || c.GetTarget() < storev1.Compare_TARGET_VERSION || c.GetTarget() > storev1.Compare_TARGET_LEASE {
		return fmt.Errorf("%w: target %v with operand %T", ErrInvalidCompare, c.GetTarget(), c.GetTargetUnion())
	}
	return nil
}

// validateOps checks one branch: each op well formed, and no key written
// twice (a put and a delete range covering it count as two writes).
func validateOps(ops []*storev1.RequestOp) error {
	puts := make(map[string]struct{})
	var dels []*storev1.DeleteRangeRequest
	for _, op := range ops {
		switch r := op.GetRequest().(type) {
		case *storev1.RequestOp_RequestRange:
			if err := ValidateRange(r.RequestRange); err != nil {
				return err
			}
		case *storev1.RequestOp_RequestPut:
			p := r.RequestPut
			if len(p.GetKey()) == 0 {
				return ErrEmptyKey
			}
			if p.GetLease() < 0 {
				return fmt.Errorf("%w: negative lease %d", ErrInvalidOp, p.GetLease())
			}
			if _, dup := puts[string(p.GetKey())]; dup {
				return fmt.Errorf("%w: %q", ErrDuplicateKey, p.GetKey())
			}
			puts[string(p.GetKey())] = struct{}{}
		case *storev1.RequestOp_RequestDeleteRange:
			d := r.RequestDeleteRange
			if err := validKeyRange(d.GetKey(), d.GetRangeEnd()); err != nil {
				return err
			}
			dels = append(dels, d)
		default:
			return fmt.Errorf("%w: empty op", ErrInvalidOp)
		}
	}
	for _, d := range dels {
		for k := range puts {
			if inRange([]byte(k), d.GetKey(), d.GetRangeEnd()) {
				return fmt.Errorf("%w: %q is put and deleted", ErrDuplicateKey, k)
			}
		}
	}
	return nil
}

// Limits are per-node size limits checked before a request is proposed.
type Limits struct {
	// MaxValueBytes caps each value of a put.
	MaxValueBytes int
	// MaxRequestBytes caps the encoded size of a whole request.
	MaxRequestBytes int
}

// CheckTxnLimits checks a TxnRequest of encoded size size against l.
func (l Limits) CheckTxnLimits(req *storev1.TxnRequest, size int) error {
	if l.MaxRequestBytes > 0 && size > l.MaxRequestBytes {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrRequestTooLarge, size, l.MaxRequestBytes)
	}
	for _, ops := range [][]*storev1.RequestOp{req.GetSuccess(), req.GetFailure()} {
		for _, op := range ops {
			if p := op.GetRequestPut(); p != nil && l.MaxValueBytes > 0 && len(p.GetValue()) > l.MaxValueBytes {
				return fmt.Errorf("%w: %d bytes for key %q, limit %d", ErrValueTooLarge, len(p.GetValue()), p.GetKey(), l.MaxValueBytes)
			}
		}
	}
	return nil
}
