package mvcc

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// TestReadTxn: a transaction that only reads gives what the same
// transaction through a WriteBatch gives, reads at explicit revisions,
// reports compacted revisions, writes nothing, and refuses writes.
func TestReadTxn(t *testing.T) {
	s := newTestStore(t)
	s.put("a", "1") // 1
	s.put("b", "2") // 2
	s.put("a", "3") // 3
	ctx := context.Background()
	reqs := []*storev1.TxnRequest{
		{Compare: []*storev1.Compare{cmp("a", storev1.Compare_TARGET_MOD, storev1.Compare_RESULT_EQUAL, int64(3))},
			Success: []*storev1.RequestOp{rangeOp("a", ""), rangeOp("a", "c")}, Failure: []*storev1.RequestOp{rangeOp("b", "")}},
		{Compare: []*storev1.Compare{cmp("a", storev1.Compare_TARGET_VALUE, storev1.Compare_RESULT_EQUAL, "1")},
			Success: []*storev1.RequestOp{rangeOp("a", "")}, Failure: []*storev1.RequestOp{rangeOp("b", ""), rangeOp("missing", "")}},
		{Compare: []*storev1.Compare{withEnd(cmp("a", storev1.Compare_TARGET_CREATE, storev1.Compare_RESULT_GREATER, int64(0)), "c")}},
	}
	for i, req := range reqs {
		got, err := s.ReadTxn(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		want := s.mustTxn(req)
		if !proto.Equal(got, want) {
			t.Fatalf("request %d: ReadTxn\n%v\nWriteBatch.Txn\n%v", i, got, want)
		}
	}
	if s.Rev() != 3 {
		t.Fatalf("revision %d after reads, want 3", s.Rev())
	}
	old := &storev1.TxnRequest{Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestRange{RequestRange: &storev1.RangeRequest{Key: []byte("a"), Revision: 1}}}}}
	r, err := s.ReadTxn(ctx, old)
	if err != nil || string(r.GetResponses()[0].GetResponseRange().GetKvs()[0].GetValue()) != "1" || r.GetHeader().GetRevision() != 3 {
		t.Fatalf("read at revision 1: %v %v", r, err)
	}
	if err := s.compact(2); err != nil {
		t.Fatal(err)
	}
	var ce *CompactedError
	if _, err := s.ReadTxn(ctx, old); !errors.As(err, &ce) || ce.CompactRev != 2 {
		t.Fatalf("read below the compacted revision: %v", err)
	}
	if _, err := s.ReadTxn(ctx, &storev1.TxnRequest{Failure: []*storev1.RequestOp{putOp("a", "x")}}); !errors.Is(err, ErrInvalidOp) {
		t.Fatalf("ReadTxn of a write: %v", err)
	}
	if s.get("a", 0).GetModRevision() != 3 {
		t.Fatal("ReadTxn wrote")
	}
}
