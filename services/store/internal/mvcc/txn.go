package mvcc

import (
	"bytes"
	"fmt"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// Txn evaluates req's compares against the batch's current state, runs the
// chosen branch and returns its response; header.revision is the revision
// after the transaction. A transaction that writes moves the revision by
// exactly one, its writes taking sub-revisions 0, 1, 2…; one that writes
// nothing leaves it unchanged.
//
// All request errors are detected before the first write, so a failed Txn
// leaves the batch unchanged.
func (w *WriteBatch) Txn(req *storev1.TxnRequest) (*storev1.TxnResponse, error) {
	if err := ValidateTxn(req); err != nil {
		return nil, err
	}
	t := txnWriter{w: w, rev: w.rev + 1}
	ok, ops, err := branch(req, t.compare)
	if err != nil {
		return nil, err
	}
	// Reads at explicit revisions are checked against the state before the
	// transaction, so no request error can occur after a write.
	for _, op := range ops {
		if r := op.GetRequestRange(); r != nil && r.GetRevision() != 0 {
			if _, err := checkRev(r.GetRevision(), w.rev, w.compactRev); err != nil {
				return nil, err
			}
		}
		if p := op.GetRequestPut(); p != nil && p.GetLease() != 0 {
			ok, err := w.leaseExists(p.GetLease())
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, fmt.Errorf("%w: %d", ErrLeaseNotFound, p.GetLease())
			}
		}
	}
	resp := &storev1.TxnResponse{Succeeded: ok, Responses: make([]*storev1.ResponseOp, 0, len(ops))}
	for _, op := range ops {
		r, err := t.do(op)
		if err != nil {
			return nil, err
		}
		resp.Responses = append(resp.Responses, r)
	}
	if t.sub > 0 {
		w.rev = t.rev
	}
	resp.Header = &storev1.ResponseHeader{Revision: w.rev, CompactRevision: w.compactRev}
	for _, r := range resp.Responses {
		if p := r.GetResponsePut(); p != nil {
			p.Header = &storev1.ResponseHeader{Revision: w.rev, CompactRevision: w.compactRev}
		}
		if d := r.GetResponseDeleteRange(); d != nil {
			d.Header = &storev1.ResponseHeader{Revision: w.rev, CompactRevision: w.compactRev}
		}
	}
	return resp, nil
}

// branch evaluates req's compares with compare, in order until one fails,
// and returns whether all held and the branch to run.
func branch(req *storev1.TxnRequest, compare func(*storev1.Compare) (bool, error)) (bool, []*storev1.RequestOp, error) {
	for _, c := range req.GetCompare() {
		holds, err := compare(c)
		if err != nil {
			return false, nil, err
		}
		if !holds {
			return false, req.GetFailure(), nil
		}
	}
	return true, req.GetSuccess(), nil
}

// compare evaluates one compare against the newest state; a range holds when
// it holds for every live key in it, and an empty range (or a missing key)
// compares as a key with zero fields and an empty value.
//
// A single key's newest version comes from the writer's index of live keys
// (liveIndex), and its record is read only when the target is not in the
// version: a mod revision is the version's revision.
func (t *txnWriter) compare(c *storev1.Compare) (bool, error) {
	if len(c.GetRangeEnd()) == 0 {
		v, live := t.w.newest(c.GetKey())
		switch {
		case !live:
			return compareRecord(c, &record{}), nil
		case c.GetTarget() == storev1.Compare_TARGET_MOD:
			return compareRecord(c, &record{mod: v.main}), nil
		}
		rec, err := getRecord(t.w.b, v.main, v.sub)
		if err != nil {
			return false, err
		}
		return compareRecord(c, rec), nil
	}
	return compareAt(t.w.b, c, latestRev)
}

// compareAt evaluates c against r's state at rev, reading every live key
// of its range.
func compareAt(r reader, c *storev1.Compare, rev int64) (bool, error) {
	res, err := rangeAt(r, c.GetKey(), c.GetRangeEnd(), rev, 0, false, false)
	if err != nil {
		return false, err
	}
	if len(res.recs) == 0 {
		return compareRecord(c, &record{}), nil
	}
	for _, rec := range res.recs {
		if !compareRecord(c, rec) {
			return false, nil
		}
	}
	return true, nil
}

func compareRecord(c *storev1.Compare, rec *record) bool {
	var cmp int
	switch c.GetTarget() {
	case storev1.Compare_TARGET_VERSION:
		cmp = cmpInt(rec.version, c.GetVersion())
	case storev1.Compare_TARGET_CREATE:
		cmp = cmpInt(rec.create, c.GetCreateRevision())
	case storev1.Compare_TARGET_MOD:
		cmp = cmpInt(rec.mod, c.GetModRevision())
	case storev1.Compare_TARGET_VALUE:
		cmp = bytes.Compare(rec.value, c.GetValue())
	case storev1.Compare_TARGET_LEASE:
		cmp = cmpInt(rec.lease, c.GetLease())
	}
	switch c.GetResult() {
	case storev1.Compare_RESULT_EQUAL:
		return cmp == 0
	case storev1.Compare_RESULT_GREATER:
		return cmp > 0
	case storev1.Compare_RESULT_LESS:
		return cmp < 0
	case storev1.Compare_RESULT_NOT_EQUAL:
		return cmp != 0
	}
	return false
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// txnWriter runs the ops of one transaction at revision rev.
type txnWriter struct {
	w   *WriteBatch
	rev int64  // the revision the transaction writes at
	sub uint32 // next sub-revision; > 0 once the transaction wrote
}

// live returns the record of key if it exists, or nil.
func (t *txnWriter) live(key []byte) (*record, error) {
	v, live := t.w.newest(key)
	if !live {
		return nil, nil
	}
	return getRecord(t.w.b, v.main, v.sub)
}

// readRev is the revision at which a range inside the transaction reads
// "now": the transaction's own revision once it wrote.
func (t *txnWriter) readRev() int64 {
	if t.sub > 0 {
		return t.rev
	}
	return t.w.rev
}

func (t *txnWriter) do(op *storev1.RequestOp) (*storev1.ResponseOp, error) {
	switch r := op.GetRequest().(type) {
	case *storev1.RequestOp_RequestRange:
		rev := r.RequestRange.GetRevision()
		if rev == 0 {
			rev = t.readRev()
		}
		rr, err := rangeResponse(t.w.b, r.RequestRange, rev, t.w.compactRev)
		if err != nil {
			return nil, err
		}
		return &storev1.ResponseOp{Response: &storev1.ResponseOp_ResponseRange{ResponseRange: rr}}, nil
	case *storev1.RequestOp_RequestPut:
		pr, err := t.put(r.RequestPut)
		if err != nil {
			return nil, err
		}
		return &storev1.ResponseOp{Response: &storev1.ResponseOp_ResponsePut{ResponsePut: pr}}, nil
	case *storev1.RequestOp_RequestDeleteRange:
		dr, err := t.deleteRange(r.RequestDeleteRange)
		if err != nil {
			return nil, err
		}
		return &storev1.ResponseOp{Response: &storev1.ResponseOp_ResponseDeleteRange{ResponseDeleteRange: dr}}, nil
	}
	return nil, ErrInvalidOp
}

func (t *txnWriter) put(p *storev1.PutRequest) (*storev1.PutResponse, error) {
	prev, err := t.live(p.GetKey())
	if err != nil {
		return nil, err
	}
	rec := &record{key: p.GetKey(), value: p.GetValue(), create: t.rev, mod: t.rev, sub: t.sub, version: 1, lease: p.GetLease()}
	if prev != nil {
		rec.create, rec.version = prev.create, prev.version+1
	}
	if err := t.w.put(rec); err != nil {
		return nil, err
	}
	if err := t.w.reattach(rec.key, prev, rec.lease); err != nil {
		return nil, err
	}
	t.sub++
	ev := rec.event()
	resp := &storev1.PutResponse{}
	if prev != nil {
		ev.PrevKv = prev.kv(false)
		if p.GetPrevKv() {
			resp.PrevKv = ev.PrevKv
		}
	}
	t.w.events = append(t.w.events, ev)
	return resp, nil
}

func (t *txnWriter) deleteRange(d *storev1.DeleteRangeRequest) (*storev1.DeleteRangeResponse, error) {
	var recs []*record
	if len(d.GetRangeEnd()) == 0 {
		// One key: its version from the live index, as for a put.
		prev, err := t.live(d.GetKey())
		if err != nil {
			return nil, err
		}
		if prev != nil {
			recs = []*record{prev}
		}
	} else {
		res, err := rangeAt(t.w.b, d.GetKey(), d.GetRangeEnd(), latestRev, 0, false, false)
		if err != nil {
			return nil, err
		}
		recs = res.recs
	}
	resp := &storev1.DeleteRangeResponse{Deleted: int64(len(recs))}
	for _, prev := range recs {
		rec := &record{key: prev.key, mod: t.rev, sub: t.sub, tomb: true}
		if err := t.w.put(rec); err != nil {
			return nil, fmt.Errorf("mvcc: delete %q: %w", prev.key, err)
		}
		if err := t.w.reattach(prev.key, prev, 0); err != nil {
			return nil, err
		}
		t.sub++
		ev := rec.event()
		ev.PrevKv = prev.kv(false)
		t.w.events = append(t.w.events, ev)
		if d.GetPrevKv() {
			resp.PrevKvs = append(resp.PrevKvs, ev.PrevKv)
		}
	}
	return resp, nil
}
