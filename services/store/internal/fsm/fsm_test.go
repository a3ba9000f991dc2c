package fsm

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/mvcc"
	"github.com/meridian-cp/meridian/services/store/internal/mvcc/mvcctest"
)

type recorder struct {
	revs   []int64
	events int
	resets int
}

func (r *recorder) Publish(rev int64, evs []*storev1.Event) {
	r.revs = append(r.revs, rev)
	r.events += len(evs)
}
func (r *recorder) Reset(int64, string) { r.resets++ }

func newFSM(t *testing.T) (*FSM, *mvcc.Store, *recorder) {
	t.Helper()
	s := mvcctest.Open(t)
	rec := &recorder{}
	f, err := New(s, rec, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return f, s, rec
}

func txnEntry(t *testing.T, index uint64, key string) *raft.Log {
	t.Helper()
	data, err := EncodeTxn(&storev1.TxnRequest{Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{Key: []byte(key), Value: []byte("v")}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return &raft.Log{Index: index, Type: raft.LogCommand, Data: data}
}

func TestApplyBatch(t *testing.T) {
	f, s, rec := newFSM(t)
	compact, err := EncodeCompact(&storev1.CompactRequest{Revision: 2})
	if err != nil {
		t.Fatal(err)
	}
	badCompact, _ := EncodeCompact(&storev1.CompactRequest{Revision: 99})
	logs := []*raft.Log{
		{Index: 1, Type: raft.LogConfiguration},
		txnEntry(t, 2, "a"),
		txnEntry(t, 3, "b"),
		{Index: 4, Type: raft.LogCommand, Data: []byte{9, 9}},
		txnEntry(t, 5, "a"),
		{Index: 6, Type: raft.LogCommand, Data: compact},
		{Index: 7, Type: raft.LogCommand, Data: badCompact},
	}
	resps := f.ApplyBatch(logs)
	if resps[0] != nil {
		t.Fatalf("configuration entry response %v", resps[0])
	}
	for i, want := range []int64{1, 2} {
		if r, ok := resps[i+1].(*storev1.TxnResponse); !ok || r.Header.Revision != want {
			t.Fatalf("entry %d response %v, want revision %d", i+2, resps[i+1], want)
		}
	}
	if err, ok := resps[3].(error); !ok || !errors.Is(err, ErrBadCommand) {
		t.Fatalf("bad command response %v", resps[3])
	}
	if r, ok := resps[5].(*storev1.CompactResponse); !ok || r.Header.CompactRevision != 2 {
		t.Fatalf("compact response %v", resps[5])
	}
	if err, ok := resps[6].(error); !ok || !errors.Is(err, mvcc.ErrFutureRev) {
		t.Fatalf("future compact response %v", resps[6])
	}
	if s.Rev() != 3 || s.AppliedIndex() != 7 || s.CompactRev() != 2 || f.AppliedIndex() != 7 {
		t.Fatalf("rev %d applied %d compact %d", s.Rev(), s.AppliedIndex(), s.CompactRev())
	}
	if len(rec.revs) != 1 || rec.revs[0] != 3 || rec.events != 3 {
		t.Fatalf("publications %v with %d events, want one at 3 with 3", rec.revs, rec.events)
	}

	// Replayed entries (a restart replays from the last snapshot) are
	// skipped; new ones apply.
	resps = f.ApplyBatch(append(logs[4:], txnEntry(t, 8, "c")))
	if resps[0] != nil || s.Rev() != 4 || s.AppliedIndex() != 8 {
		t.Fatalf("replay: resps %v rev %d applied %d", resps, s.Rev(), s.AppliedIndex())
	}
}

func TestSnapshotRestore(t *testing.T) {
	f, s, _ := newFSM(t)
	f.ApplyBatch([]*raft.Log{txnEntry(t, 1, "a"), txnEntry(t, 2, "b")})

	snaps := raft.NewInmemSnapshotStore()
	fs, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink, err := snaps.Create(raft.SnapshotVersionMax, 2, 1, raft.Configuration{}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Persist(sink); err != nil {
		t.Fatal(err)
	}
	fs.Release()

	f2, s2, rec2 := newFSM(t)
	f2.ApplyBatch([]*raft.Log{txnEntry(t, 1, "zzz")})
	metas, _ := snaps.List()
	_, rc, err := snaps.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := f2.Restore(rc); err != nil {
		t.Fatal(err)
	}
	if s2.Rev() != s.Rev() || s2.AppliedIndex() != 2 || rec2.resets != 1 {
		t.Fatalf("restored rev %d applied %d resets %d", s2.Rev(), s2.AppliedIndex(), rec2.resets)
	}
}
