package mvcc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

type testStore struct {
	*Store
	t       testing.TB
	db      *pebble.DB
	dir     string
	applied uint64
}

func newTestStore(t testing.TB) *testStore {
	t.Helper()
	return newTestStoreWith(t, &pebble.Options{})
}

// newTestStoreWith opens a store on a new pebble database with opts.
func newTestStoreWith(t testing.TB, opts *pebble.Options) *testStore {
	t.Helper()
	dir := t.TempDir()
	db, err := pebble.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := Open(db, opts.Cache)
	if err != nil {
		t.Fatal(err)
	}
	return &testStore{Store: s, t: t, db: db, dir: dir}
}

// txn applies one transaction in its own batch.
func (ts *testStore) txn(req *storev1.TxnRequest) (*storev1.TxnResponse, error) {
	w := ts.NewWriteBatch()
	defer w.Close()
	resp, err := w.Txn(req)
	if err != nil {
		return nil, err
	}
	ts.applied++
	if _, err := w.Commit(ts.applied, pebble.NoSync); err != nil {
		ts.t.Fatal(err)
	}
	return resp, nil
}

func (ts *testStore) mustTxn(req *storev1.TxnRequest) *storev1.TxnResponse {
	ts.t.Helper()
	resp, err := ts.txn(req)
	if err != nil {
		ts.t.Fatal(err)
	}
	return resp
}

func (ts *testStore) put(key, val string) int64 {
	ts.t.Helper()
	return ts.mustTxn(&storev1.TxnRequest{Success: []*storev1.RequestOp{putOp(key, val)}}).GetHeader().GetRevision()
}

func (ts *testStore) del(key, end string) int64 {
	ts.t.Helper()
	return ts.mustTxn(&storev1.TxnRequest{Success: []*storev1.RequestOp{delOp(key, end)}}).GetHeader().GetRevision()
}

func (ts *testStore) compact(rev int64) error {
	w := ts.NewWriteBatch()
	defer w.Close()
	if _, err := w.Compact(rev); err != nil {
		return err
	}
	ts.applied++
	_, err := w.Commit(ts.applied, pebble.NoSync)
	return err
}

func (ts *testStore) rng(req *storev1.RangeRequest) *storev1.RangeResponse {
	ts.t.Helper()
	resp, err := ts.Range(context.Background(), req)
	if err != nil {
		ts.t.Fatalf("Range(%v): %v", req, err)
	}
	return resp
}

func (ts *testStore) get(key string, rev int64) *storev1.KeyValue {
	ts.t.Helper()
	resp := ts.rng(&storev1.RangeRequest{Key: []byte(key), Revision: rev})
	if len(resp.Kvs) == 0 {
		return nil
	}
	return resp.Kvs[0]
}

func putOp(key, val string) *storev1.RequestOp {
	return &storev1.RequestOp{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{Key: []byte(key), Value: []byte(val)}}}
}

func delOp(key, end string) *storev1.RequestOp {
	return &storev1.RequestOp{Request: &storev1.RequestOp_RequestDeleteRange{RequestDeleteRange: &storev1.DeleteRangeRequest{Key: []byte(key), RangeEnd: []byte(end), PrevKv: true}}}
}

func rangeOp(key, end string) *storev1.RequestOp {
	return &storev1.RequestOp{Request: &storev1.RequestOp_RequestRange{RequestRange: &storev1.RangeRequest{Key: []byte(key), RangeEnd: []byte(end)}}}
}

func wantKV(t *testing.T, kv *storev1.KeyValue, val string, create, mod, ver int64) {
	t.Helper()
	if kv == nil {
		t.Fatalf("missing key, want value %q", val)
	}
	if string(kv.Value) != val || kv.CreateRevision != create || kv.ModRevision != mod || kv.Version != ver {
		t.Fatalf("kv %q = {value %q create %d mod %d version %d}, want {%q %d %d %d}",
			kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, val, create, mod, ver)
	}
}

func keysOf(kvs []*storev1.KeyValue) []string {
	var ks []string
	for _, kv := range kvs {
		ks = append(ks, string(kv.Key))
	}
	return ks
}

func TestRangeAtPastRevisions(t *testing.T) {
	s := newTestStore(t)
	if r := s.put("a", "1"); r != 1 {
		t.Fatalf("first revision %d", r)
	}
	s.put("b", "1") // 2
	s.put("a", "2") // 3
	s.del("a", "")  // 4
	s.put("a", "3") // 5
	if s.Rev() != 5 {
		t.Fatalf("rev %d, want 5", s.Rev())
	}
	wantKV(t, s.get("a", 1), "1", 1, 1, 1)
	if s.get("b", 1) != nil {
		t.Fatal("b visible at revision 1")
	}
	wantKV(t, s.get("a", 2), "1", 1, 1, 1)
	wantKV(t, s.get("a", 3), "2", 1, 3, 2)
	if kv := s.get("a", 4); kv != nil {
		t.Fatalf("deleted key visible at 4: %v", kv)
	}
	// delete + recreate: version resets, create_revision is the new one.
	wantKV(t, s.get("a", 5), "3", 5, 5, 1)
	wantKV(t, s.get("a", 0), "3", 5, 5, 1)
	wantKV(t, s.get("b", 0), "1", 2, 2, 1)

	resp := s.rng(&storev1.RangeRequest{Key: []byte("a"), Revision: 3})
	if resp.Header.Revision != 3 {
		t.Fatalf("header revision %d, want the revision read at", resp.Header.Revision)
	}
	var fe *FutureRevError
	if _, err := s.Range(context.Background(), &storev1.RangeRequest{Key: []byte("a"), Revision: 6}); !errors.As(err, &fe) || fe.CurrentRev != 5 || !errors.Is(err, ErrFutureRev) {
		t.Fatalf("future read: %v", err)
	}
}

func TestRangeOptions(t *testing.T) {
	s := newTestStore(t)
	for _, k := range []string{"foo/a", "foo/b", "foo/c", "foo/d", "foo/e", "fop", "zz", "a", "a\x00", "a\x00b", "a\x01", "ab", "fo"} {
		s.put(k, "v-"+k)
	}
	s.del("foo/d", "")

	cases := []struct {
		name      string
		req       *storev1.RangeRequest
		keys      []string
		count     int64
		more      bool
		wantValue bool
	}{
		{"prefix", &storev1.RangeRequest{Key: []byte("foo/"), RangeEnd: []byte("foo0")}, []string{"foo/a", "foo/b", "foo/c", "foo/e"}, 4, false, true},
		{"limit", &storev1.RangeRequest{Key: []byte("foo/"), RangeEnd: []byte("foo0"), Limit: 2}, []string{"foo/a", "foo/b"}, 4, true, true},
		{"limit exact", &storev1.RangeRequest{Key: []byte("foo/"), RangeEnd: []byte("foo0"), Limit: 4}, []string{"foo/a", "foo/b", "foo/c", "foo/e"}, 4, false, true},
		{"keys only", &storev1.RangeRequest{Key: []byte("foo/"), RangeEnd: []byte("foo0"), KeysOnly: true}, []string{"foo/a", "foo/b", "foo/c", "foo/e"}, 4, false, false},
		{"count only", &storev1.RangeRequest{Key: []byte("foo/"), RangeEnd: []byte("foo0"), CountOnly: true}, nil, 4, false, false},
		{"from key", &storev1.RangeRequest{Key: []byte("foo/c"), RangeEnd: []byte{0}}, []string{"foo/c", "foo/e", "fop", "zz"}, 4, false, true},
		{"all", &storev1.RangeRequest{Key: []byte{}, RangeEnd: []byte{0}, KeysOnly: true}, []string{"a", "a\x00", "a\x00b", "a\x01", "ab", "fo", "foo/a", "foo/b", "foo/c", "foo/e", "fop", "zz"}, 12, false, false},
		{"range", &storev1.RangeRequest{Key: []byte("a"), RangeEnd: []byte("ab")}, []string{"a", "a\x00", "a\x00b", "a\x01"}, 4, false, true},
		{"single", &storev1.RangeRequest{Key: []byte("a\x00")}, []string{"a\x00"}, 1, false, true},
		{"single missing", &storev1.RangeRequest{Key: []byte("foo/d")}, nil, 0, false, true},
		{"single prefix of others", &storev1.RangeRequest{Key: []byte("fo")}, []string{"fo"}, 1, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := s.rng(c.req)
			if fmt.Sprintf("%q", keysOf(resp.Kvs)) != fmt.Sprintf("%q", c.keys) {
				t.Fatalf("keys %q, want %q", keysOf(resp.Kvs), c.keys)
			}
			if resp.Count != c.count || resp.More != c.more {
				t.Fatalf("count %d more %v, want %d %v", resp.Count, resp.More, c.count, c.more)
			}
			for _, kv := range resp.Kvs {
				if got := len(kv.Value) > 0; got != c.wantValue {
					t.Fatalf("value present=%v for %q, want %v", got, kv.Key, c.wantValue)
				}
				if kv.ModRevision == 0 || kv.CreateRevision == 0 || kv.Version != 1 {
					t.Fatalf("keys-only kv lacks metadata: %v", kv)
				}
			}
		})
	}
	// Range takes validated requests (validate.go); the rule is
	// ValidateRange's, and the server applies it at the API boundary
	// (server's TestBadInputIsRefusedBeforeTheReadBarrier).
	for _, bad := range []*storev1.RangeRequest{
		{Key: nil},
		{Key: []byte("b"), RangeEnd: []byte("a")},
		{Key: []byte("b"), RangeEnd: []byte("b")},
		{Key: []byte("b"), Limit: -1},
	} {
		if err := ValidateRange(bad); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ValidateRange(%v) = %v, want ErrInvalidArgument", bad, err)
		}
	}
}

func cmp(key string, target storev1.Compare_Target, result storev1.Compare_Result, operand any) *storev1.Compare {
	c := &storev1.Compare{Key: []byte(key), Target: target, Result: result}
	switch target {
	case storev1.Compare_TARGET_VERSION:
		c.TargetUnion = &storev1.Compare_Version{Version: operand.(int64)}
	case storev1.Compare_TARGET_CREATE:
		c.TargetUnion = &storev1.Compare_CreateRevision{CreateRevision: operand.(int64)}
	case storev1.Compare_TARGET_MOD:
		c.TargetUnion = &storev1.Compare_ModRevision{ModRevision: operand.(int64)}
	case storev1.Compare_TARGET_VALUE:
		c.TargetUnion = &storev1.Compare_Value{Value: []byte(operand.(string))}
	case storev1.Compare_TARGET_LEASE:
		c.TargetUnion = &storev1.Compare_Lease{Lease: operand.(int64)}
	}
	return c
}

func TestTxnCompare(t *testing.T) {
	s := newTestStore(t)
	s.put("k", "m")    // 1: k create 1 mod 1 version 1
	s.put("other", "") // 2
	s.put("k", "m")    // 3: k create 1 mod 3 version 2
	s.put("r/1", "b")  // 4
	s.put("r/2", "c")  // 5

	const (
		V  = storev1.Compare_TARGET_VERSION
		C  = storev1.Compare_TARGET_CREATE
		M  = storev1.Compare_TARGET_MOD
		VA = storev1.Compare_TARGET_VALUE
		L  = storev1.Compare_TARGET_LEASE
		EQ = storev1.Compare_RESULT_EQUAL
		GT = storev1.Compare_RESULT_GREATER
		LT = storev1.Compare_RESULT_LESS
		NE = storev1.Compare_RESULT_NOT_EQUAL
	)
	cases := []struct {
		c    *storev1.Compare
		want bool
	}{
		{cmp("k", V, EQ, int64(2)), true}, {cmp("k", V, GT, int64(1)), true}, {cmp("k", V, LT, int64(2)), false}, {cmp("k", V, NE, int64(2)), false},
		{cmp("k", C, EQ, int64(1)), true}, {cmp("k", C, GT, int64(1)), false}, {cmp("k", C, LT, int64(2)), true}, {cmp("k", C, NE, int64(0)), true},
		{cmp("k", M, EQ, int64(3)), true}, {cmp("k", M, GT, int64(2)), true}, {cmp("k", M, LT, int64(3)), false}, {cmp("k", M, NE, int64(3)), false},
		{cmp("k", VA, EQ, "m"), true}, {cmp("k", VA, GT, "a"), true}, {cmp("k", VA, LT, "n"), true}, {cmp("k", VA, NE, "m"), false},
		{cmp("k", L, EQ, int64(0)), true}, {cmp("k", L, GT, int64(0)), false}, {cmp("k", L, LT, int64(1)), true}, {cmp("k", L, NE, int64(0)), false},
		// A missing key compares as zero revisions/version/lease and an empty value.
		{cmp("missing", C, EQ, int64(0)), true}, {cmp("missing", M, EQ, int64(0)), true}, {cmp("missing", V, EQ, int64(0)), true},
		{cmp("missing", V, GT, int64(0)), false}, {cmp("missing", L, EQ, int64(0)), true}, {cmp("missing", VA, EQ, ""), true},
		{cmp("missing", VA, LT, "a"), true}, {cmp("missing", C, LT, int64(1)), true},
		// Ranges: every key must hold.
		{withEnd(cmp("r/", VA, GT, "a"), "r0"), true}, {withEnd(cmp("r/", VA, EQ, "b"), "r0"), false},
		{withEnd(cmp("r/", M, GT, int64(3)), "r0"), true}, {withEnd(cmp("r/", M, GT, int64(4)), "r0"), false},
		{withEnd(cmp("x/", C, EQ, int64(0)), "x0"), true}, {withEnd(cmp("r/", C, EQ, int64(0)), "r0"), false},
	}
	for i, c := range cases {
		rev := s.Rev()
		resp := s.mustTxn(&storev1.TxnRequest{Compare: []*storev1.Compare{c.c}, Success: []*storev1.RequestOp{rangeOp("k", "")}})
		if resp.Succeeded != c.want {
			t.Errorf("case %d %v %v %v on %q: succeeded=%v, want %v", i, c.c.Target, c.c.Result, c.c.TargetUnion, c.c.Key, resp.Succeeded, c.want)
		}
		if s.Rev() != rev || resp.Header.Revision != rev {
			t.Fatalf("read-only txn moved the revision %d → %d", rev, s.Rev())
		}
	}
	// Invalid compares are rejected.
	for _, bad := range []*storev1.Compare{
		{Key: []byte("k"), Target: V, Result: storev1.Compare_RESULT_UNSPECIFIED},
		{Key: []byte("k"), Target: storev1.Compare_TARGET_UNSPECIFIED, Result: EQ},
		{Key: []byte("k"), Target: V, Result: EQ, TargetUnion: &storev1.Compare_Value{Value: []byte("x")}},
		{Key: nil, Target: V, Result: EQ},
	} {
		if _, err := s.txn(&storev1.TxnRequest{Compare: []*storev1.Compare{bad}}); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("compare %v: %v, want ErrInvalidArgument", bad, err)
		}
	}
}

func withEnd(c *storev1.Compare, end string) *storev1.Compare {
	c.RangeEnd = []byte(end)
	return c
}

func TestTxnBranchesAndRevisions(t *testing.T) {
	s := newTestStore(t)
	s.put("a", "0") // 1
	create := cmp("a", storev1.Compare_TARGET_CREATE, storev1.Compare_RESULT_EQUAL, int64(0))

	// Failure branch runs: read-only, no revision.
	resp := s.mustTxn(&storev1.TxnRequest{Compare: []*storev1.Compare{create}, Success: []*storev1.RequestOp{putOp("a", "x")}, Failure: []*storev1.RequestOp{rangeOp("a", "")}})
	if resp.Succeeded || s.Rev() != 1 || len(resp.Responses) != 1 || string(resp.Responses[0].GetResponseRange().Kvs[0].Value) != "0" {
		t.Fatalf("failure branch: %v rev %d", resp, s.Rev())
	}
	// Deleting nothing writes nothing.
	if r := s.del("nope", ""); r != 1 {
		t.Fatalf("delete of a missing key moved the revision to %d", r)
	}

	// One transaction, several writes: one revision, sub-revisions in order,
	// and a range inside the transaction sees the earlier ops.
	resp = s.mustTxn(&storev1.TxnRequest{Success: []*storev1.RequestOp{
		putOp("b", "1"), putOp("c", "1"), rangeOp("a", "z"), delOp("a", ""),
		rangeOp("a", "z"),
	}})
	if resp.Header.Revision != 2 || s.Rev() != 2 {
		t.Fatalf("multi-write txn revision %d (store %d), want 2", resp.Header.Revision, s.Rev())
	}
	if got := keysOf(resp.Responses[2].GetResponseRange().Kvs); fmt.Sprint(got) != "[a b c]" {
		t.Fatalf("range in txn saw %q", got)
	}
	if got := keysOf(resp.Responses[4].GetResponseRange().Kvs); fmt.Sprint(got) != "[b c]" {
		t.Fatalf("range after delete in txn saw %q", got)
	}
	if d := resp.Responses[3].GetResponseDeleteRange(); d.Deleted != 1 || string(d.PrevKvs[0].Value) != "0" {
		t.Fatalf("delete response %v", d)
	}
	h := s.OpenHistory()
	defer h.Close()
	var evs []string
	if err := h.Events(context.Background(), 2, 2, []byte{}, []byte{0}, false, func(e *storev1.Event) error {
		evs = append(evs, fmt.Sprintf("%v:%s@%d", e.Type, e.Kv.Key, e.Kv.ModRevision))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(evs) != "[TYPE_PUT:b@2 TYPE_PUT:c@2 TYPE_DELETE:a@2]" {
		t.Fatalf("events of the txn %v", evs)
	}

	// Duplicate writes and leases are rejected without side effects.
	for _, req := range []*storev1.TxnRequest{
		{Success: []*storev1.RequestOp{putOp("x", "1"), putOp("x", "2")}},
		{Success: []*storev1.RequestOp{putOp("x", "1"), delOp("w", "y")}},
		{Success: []*storev1.RequestOp{putOp("", "1")}},
		{Success: []*storev1.RequestOp{{}}},
	} {
		if _, err := s.txn(req); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("txn %v: %v, want ErrInvalidArgument", req, err)
		}
	}
	lease := &storev1.TxnRequest{Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{Key: []byte("l"), Lease: 7}}}}}
	if _, err := s.txn(lease); !errors.Is(err, ErrLeaseNotFound) {
		t.Errorf("lease put: %v", err)
	}
	if s.Rev() != 2 {
		t.Fatalf("rejected txns moved the revision to %d", s.Rev())
	}
}

func TestBatchSeesEarlierTxns(t *testing.T) {
	s := newTestStore(t)
	w := s.NewWriteBatch()
	create := cmp("a", storev1.Compare_TARGET_CREATE, storev1.Compare_RESULT_EQUAL, int64(0))
	var revs []int64
	for i := range 3 {
		resp, err := w.Txn(&storev1.TxnRequest{Compare: []*storev1.Compare{create}, Success: []*storev1.RequestOp{putOp("a", fmt.Sprint(i))}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Succeeded != (i == 0) {
			t.Fatalf("txn %d succeeded=%v", i, resp.Succeeded)
		}
		revs = append(revs, resp.Header.Revision)
	}
	evs, err := w.Commit(3, pebble.NoSync)
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(revs) != "[1 1 1]" || len(evs) != 1 || s.Rev() != 1 || s.AppliedIndex() != 3 {
		t.Fatalf("revs %v events %d rev %d applied %d", revs, len(evs), s.Rev(), s.AppliedIndex())
	}
}

func TestHistoryEventsWithPrevKV(t *testing.T) {
	s := newTestStore(t)
	s.put("a", "1")  // 1
	s.put("b", "1")  // 2
	s.put("a", "2")  // 3
	s.del("a", "")   // 4
	s.put("a", "3")  // 5
	s.put("ab", "x") // 6
	h := s.OpenHistory()
	defer h.Close()
	var got []string
	err := h.Events(context.Background(), 2, 6, []byte("a"), nil, true, func(e *storev1.Event) error {
		prev := "-"
		if e.PrevKv != nil {
			prev = fmt.Sprintf("%s@%d", e.PrevKv.Value, e.PrevKv.ModRevision)
		}
		got = append(got, fmt.Sprintf("%v %s=%s@%d v%d prev=%s", e.Type, e.Kv.Key, e.Kv.Value, e.Kv.ModRevision, e.Kv.Version, prev))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"TYPE_PUT a=2@3 v2 prev=1@1",
		"TYPE_DELETE a=@4 v0 prev=2@3",
		"TYPE_PUT a=3@5 v1 prev=-",
	}
	if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
		t.Fatalf("events\n%q\nwant\n%q", got, want)
	}
}

func TestCompaction(t *testing.T) {
	s := newTestStore(t)
	s.put("a", "1") // 1
	s.put("b", "1") // 2
	s.put("a", "2") // 3
	s.put("c", "1") // 4
	s.del("c", "")  // 5
	s.put("a", "3") // 6
	s.put("d", "1") // 7
	s.del("d", "")  // 8
	s.put("b", "2") // 9
	if err := s.compact(8); err != nil {
		t.Fatal(err)
	}
	var ce *CompactedError
	if _, err := s.Range(context.Background(), &storev1.RangeRequest{Key: []byte("a"), Revision: 7}); !errors.As(err, &ce) || ce.CompactRev != 8 || ce.Requested != 7 || !errors.Is(err, ErrCompacted) {
		t.Fatalf("read below compaction: %v", err)
	}
	wantKV(t, s.get("a", 8), "3", 1, 6, 3)
	wantKV(t, s.get("b", 8), "1", 2, 2, 1)
	wantKV(t, s.get("b", 9), "2", 2, 9, 2)
	if s.get("c", 8) != nil || s.get("d", 8) != nil {
		t.Fatal("deleted keys visible after compaction")
	}
	// Only the latest version <= 8 of live keys, the delete at exactly 8 and
	// versions after 8 remain.
	if got := s.records(); fmt.Sprint(got) != "[2 6 8 9]" {
		t.Fatalf("records after compaction %v, want [2 6 8 9]", got)
	}
	h := s.OpenHistory()
	if err := h.Events(context.Background(), 7, 9, []byte{}, []byte{0}, false, func(*storev1.Event) error { return nil }); !errors.As(err, &ce) || ce.CompactRev != 8 {
		t.Fatalf("history below compaction: %v", err)
	}
	var n int
	if err := h.Events(context.Background(), 8, 9, []byte{}, []byte{0}, false, func(*storev1.Event) error { n++; return nil }); err != nil || n != 2 {
		t.Fatalf("history from compaction: %d events, %v", n, err)
	}
	h.Close()

	if err := s.compact(8); !errors.Is(err, ErrCompacted) {
		t.Fatalf("compact at the compacted revision: %v", err)
	}
	if err := s.compact(10); !errors.Is(err, ErrFutureRev) {
		t.Fatalf("compact in the future: %v", err)
	}
	// A second, incremental compaction drops the delete kept at 8 and the
	// superseded b.
	s.put("a", "4") // 10
	if err := s.compact(10); err != nil {
		t.Fatal(err)
	}
	if got := s.records(); fmt.Sprint(got) != "[9 10]" {
		t.Fatalf("records after second compaction %v, want [9 10]", got)
	}
	if n := s.indexEntries(); n != 2 {
		t.Fatalf("%d index entries, want 2", n)
	}
	wantKV(t, s.get("a", 0), "4", 1, 10, 4)
}

// records lists the main revisions of the stored records.
func (ts *testStore) records() []int64 {
	it, err := ts.db.NewIter(&pebble.IterOptions{LowerBound: recPrefix, UpperBound: recEnd})
	if err != nil {
		ts.t.Fatal(err)
	}
	defer it.Close()
	var revs []int64
	for ok := it.First(); ok; ok = it.Next() {
		main, _, _ := parseRecordKey(it.Key())
		revs = append(revs, main)
	}
	return revs
}

func (ts *testStore) indexEntries() int {
	it, err := ts.db.NewIter(&pebble.IterOptions{LowerBound: idxPrefix, UpperBound: idxEnd})
	if err != nil {
		ts.t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	return n
}

func TestReopenAndSnapshotRestore(t *testing.T) {
	s := newTestStore(t)
	for i := range 20 {
		s.put(fmt.Sprintf("k%02d", i%7), fmt.Sprint(i))
	}
	if err := s.compact(10); err != nil {
		t.Fatal(err)
	}
	// Reopen from the same DB: meta restored.
	s2, err := Open(s.db, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s2.Rev() != 20 || s2.CompactRev() != 10 || s2.AppliedIndex() != s.applied {
		t.Fatalf("reopened rev %d compact %d applied %d", s2.Rev(), s2.CompactRev(), s2.AppliedIndex())
	}

	var buf bytes.Buffer
	snap := s.NewSnapshot()
	if _, err := snap.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	snap.Close()

	other := newTestStore(t)
	other.put("junk", "x")
	if err := other.Restore(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	if other.Rev() != 20 || other.CompactRev() != 10 || other.AppliedIndex() != s.applied {
		t.Fatalf("restored rev %d compact %d applied %d", other.Rev(), other.CompactRev(), other.AppliedIndex())
	}
	if other.get("junk", 0) != nil {
		t.Fatal("restore kept old keys")
	}
	a := s.rng(&storev1.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l")})
	b := other.rng(&storev1.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l")})
	if fmt.Sprint(a.Kvs) != fmt.Sprint(b.Kvs) {
		t.Fatalf("restored data differs:\n%v\n%v", a.Kvs, b.Kvs)
	}
	if need, err := NeedsRestore(other.db); err != nil || need {
		t.Fatalf("NeedsRestore after a complete restore: %v %v", need, err)
	}
	if err := other.Restore(bytes.NewReader(buf.Bytes()[:buf.Len()/2])); err == nil {
		t.Fatal("truncated snapshot restored")
	}
	if need, _ := NeedsRestore(other.db); !need {
		t.Fatal("interrupted restore not reported")
	}
}
