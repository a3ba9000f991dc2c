package app

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// member is a running App with a gRPC client over loopback TCP.
type member struct {
	app    *App
	conn   *grpc.ClientConn
	kv     storev1.KVServiceClient
	watch  storev1.WatchServiceClient
	maint  storev1.MaintenanceServiceClient
	served *daemontest.Served
}

func start(t *testing.T, cfg Config) *member {
	t.Helper()
	// A bound, not a deadline the store must meet: a restart replays its
	// log, which takes a while on a loaded machine under -race.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, err := New(ctx, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	m := &member{app: a, served: daemontest.Serve(t, a)}
	m.conn, err = grpc.NewClient(m.served.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	m.kv = storev1.NewKVServiceClient(m.conn)
	m.watch = storev1.NewWatchServiceClient(m.conn)
	m.maint = storev1.NewMaintenanceServiceClient(m.conn)
	t.Cleanup(func() { m.stop(t) })
	return m
}

func (m *member) stop(t *testing.T) {
	t.Helper()
	if m.conn == nil {
		return
	}
	m.conn.Close()
	m.conn = nil
	if err := m.app.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := m.app.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := m.served.Wait(); err != nil {
		t.Errorf("Serve returned %v after Close", err)
	}
}

func testConfig(t *testing.T) Config {
	// A 1 MiB ballast: the default 64 MiB per test store is disk (or, on
	// tmpfs, memory) for nothing.
	return Config{DataDir: t.TempDir(), Bootstrap: true, CompactionRetention: -1, Logger: testLogger(), BallastBytes: 1 << 20}
}

func put(key, val string) *storev1.RequestOp {
	return &storev1.RequestOp{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{Key: []byte(key), Value: []byte(val)}}}
}

func (m *member) put(t *testing.T, key, val string) int64 {
	t.Helper()
	resp, err := m.kv.Txn(context.Background(), &storev1.TxnRequest{Success: []*storev1.RequestOp{put(key, val)}})
	if err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
	return resp.GetHeader().GetRevision()
}

func (m *member) rng(t *testing.T, req *storev1.RangeRequest) *storev1.RangeResponse {
	t.Helper()
	resp, err := m.kv.Range(context.Background(), req)
	if err != nil {
		t.Fatalf("Range: %v", err)
	}
	return resp
}

func TestRestartKeepsStateAndNeverReapplies(t *testing.T) {
	cfg := testConfig(t)
	m := start(t, cfg)
	const n = 50
	for i := range n {
		if rev := m.put(t, fmt.Sprintf("k/%03d", i), fmt.Sprint(i)); rev != int64(i+1) {
			t.Fatalf("write %d at revision %d", i, rev)
		}
	}
	before := m.rng(t, &storev1.RangeRequest{Key: []byte("k/"), RangeEnd: []byte("k0")})
	st, err := m.maint.Status(context.Background(), &storev1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	m.stop(t)

	for round := range 2 {
		m2 := start(t, cfg)
		after := m2.rng(t, &storev1.RangeRequest{Key: []byte("k/"), RangeEnd: []byte("k0")})
		if after.Header.Revision != int64(n+round) || after.Count != n {
			t.Fatalf("round %d: after restart revision %d count %d, want %d %d", round, after.Header.Revision, after.Count, n+round, n)
		}
		if round == 0 && fmt.Sprint(after.Kvs) != fmt.Sprint(before.Kvs) {
			t.Fatal("data changed across restart")
		}
		st2, err := m2.maint.Status(context.Background(), &storev1.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if st2.AppliedIndex < st.AppliedIndex {
			t.Fatalf("applied index went back: %d < %d", st2.AppliedIndex, st.AppliedIndex)
		}
		if rev := m2.put(t, "after-restart", fmt.Sprint(round)); rev != int64(n+round+1) {
			t.Fatalf("round %d: first write after restart at revision %d, want %d", round, rev, n+round+1)
		}
		m2.stop(t)
	}
}

func TestGroupCommitConcurrentTxns(t *testing.T) {
	m := start(t, testConfig(t))
	const workers, each = 32, 10
	var mu sync.Mutex
	var revs []int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				resp, err := m.kv.Txn(context.Background(), &storev1.TxnRequest{Success: []*storev1.RequestOp{put(fmt.Sprintf("w%d/%d", w, i), "v")}})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				revs = append(revs, resp.Header.Revision)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sort.Slice(revs, func(i, j int) bool { return revs[i] < revs[j] })
	for i, r := range revs {
		if r != int64(i+1) {
			t.Fatalf("revisions not unique and contiguous: position %d has %d", i, r)
		}
	}
	resp := m.rng(t, &storev1.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, CountOnly: true})
	if resp.Count != workers*each || resp.Header.Revision != workers*each {
		t.Fatalf("count %d at revision %d", resp.Count, resp.Header.Revision)
	}
}

func TestBadInputIsInvalidArgument(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxValueBytes = 1024
	m := start(t, cfg)
	m.put(t, "ok", "v")
	big := strings.Repeat("x", 1025)
	for name, req := range map[string]*storev1.TxnRequest{
		"empty key":     {Success: []*storev1.RequestOp{put("", "v")}},
		"value too big": {Success: []*storev1.RequestOp{put("big", big)}},
		"duplicate key": {Success: []*storev1.RequestOp{put("d", "1"), put("d", "2")}},
	} {
		if _, err := m.kv.Txn(context.Background(), req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: %v, want InvalidArgument", name, err)
		}
	}
	for name, req := range map[string]*storev1.RangeRequest{
		"empty key": {},
		"bad range": {Key: []byte("b"), RangeEnd: []byte("a")},
	} {
		if _, err := m.kv.Range(context.Background(), req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("range %s: %v, want InvalidArgument", name, err)
		}
	}
	resp := m.rng(t, &storev1.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	if resp.Header.Revision != 1 || resp.Count != 1 {
		t.Fatalf("bad input changed the store: revision %d count %d", resp.Header.Revision, resp.Count)
	}
}

func compactedDetail(t *testing.T, err error) *storev1.CompactedError {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != codes.OutOfRange {
		t.Fatalf("error %v, want OutOfRange", err)
	}
	for _, d := range st.Details() {
		if ce, ok := d.(*storev1.CompactedError); ok {
			return ce
		}
	}
	t.Fatalf("OutOfRange without a CompactedError detail: %v", st.Details())
	return nil
}

func TestCompactionErrorsOverGRPC(t *testing.T) {
	m := start(t, testConfig(t))
	for i := range 10 {
		m.put(t, "k", fmt.Sprint(i))
	}
	resp, err := m.kv.Compact(context.Background(), &storev1.CompactRequest{Revision: 6})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.CompactRevision != 6 {
		t.Fatalf("compact header %v", resp.Header)
	}

	_, err = m.kv.Range(context.Background(), &storev1.RangeRequest{Key: []byte("k"), Revision: 5})
	if ce := compactedDetail(t, err); ce.CompactRevision != 6 || ce.RequestedRevision != 5 {
		t.Fatalf("range detail %v", ce)
	}
	got := m.rng(t, &storev1.RangeRequest{Key: []byte("k"), Revision: 6})
	if string(got.Kvs[0].Value) != "5" || got.Header.CompactRevision != 6 {
		t.Fatalf("read at the compacted revision: %v", got)
	}

	// A watch below the compacted revision fails at creation.
	stream, err := m.watch.Watch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&storev1.WatchRequest{RequestUnion: &storev1.WatchRequest_CreateRequest{CreateRequest: &storev1.WatchCreateRequest{Key: []byte("k"), StartRevision: 3}}}); err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	if ce := compactedDetail(t, err); ce.CompactRevision != 6 || ce.RequestedRevision != 3 {
		t.Fatalf("watch detail %v", ce)
	}
	// From the compacted revision on, it works.
	evs := watchEvents(t, m, &storev1.WatchCreateRequest{Key: []byte("k"), StartRevision: 6}, 5)
	if evs[0].Kv.ModRevision != 6 || evs[4].Kv.ModRevision != 10 {
		t.Fatalf("events from 6: %v", evs)
	}

	if _, err := m.kv.Compact(context.Background(), &storev1.CompactRequest{Revision: 4}); status.Code(err) != codes.OutOfRange {
		t.Fatalf("compact below the compacted revision: %v", err)
	}
	_, err = m.kv.Compact(context.Background(), &storev1.CompactRequest{Revision: 11})
	if st, _ := status.FromError(err); st.Code() != codes.FailedPrecondition || len(st.Details()) != 1 {
		t.Fatalf("compact in the future: %v", err)
	}
	_, err = m.kv.Range(context.Background(), &storev1.RangeRequest{Key: []byte("k"), Revision: 11})
	st, _ := status.FromError(err)
	if st.Code() != codes.FailedPrecondition {
		t.Fatalf("future read: %v", err)
	}
	if fe, ok := st.Details()[0].(*storev1.FutureRevisionError); !ok || fe.CurrentRevision != 10 || fe.RequestedRevision != 11 {
		t.Fatalf("future read detail %v", st.Details())
	}
}

// watchEvents opens a watch and collects n events.
func watchEvents(t *testing.T, m *member, req *storev1.WatchCreateRequest, n int) []*storev1.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := m.watch.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&storev1.WatchRequest{RequestUnion: &storev1.WatchRequest_CreateRequest{CreateRequest: req}}); err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil || !first.Created {
		t.Fatalf("first watch response %v, %v", first, err)
	}
	var evs []*storev1.Event
	for len(evs) < n {
		r, err := stream.Recv()
		if err != nil {
			t.Fatalf("after %d events: %v", len(evs), err)
		}
		evs = append(evs, r.Events...)
	}
	return evs
}

func TestWatchOverGRPC(t *testing.T) {
	cfg := testConfig(t)
	cfg.ProgressInterval = 100 * time.Millisecond
	m := start(t, cfg)
	m.put(t, "a", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := m.watch.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	create := &storev1.WatchCreateRequest{Key: []byte("a"), RangeEnd: []byte("b"), StartRevision: 1, PrevKv: true, ProgressNotify: true}
	if err := stream.Send(&storev1.WatchRequest{RequestUnion: &storev1.WatchRequest_CreateRequest{CreateRequest: create}}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil || !r.Created || r.Header.Revision != 1 || r.Header.MemberId == 0 {
		t.Fatalf("created response %v, %v", r, err)
	}
	m.put(t, "a", "2")
	var evs []*storev1.Event
	for len(evs) < 2 {
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, r.Events...)
	}
	if string(evs[0].Kv.Value) != "1" || string(evs[1].Kv.Value) != "2" || string(evs[1].PrevKv.Value) != "1" {
		t.Fatalf("events %v", evs)
	}
	// Idle: periodic progress notifications; and one on request.
	if err := stream.Send(&storev1.WatchRequest{RequestUnion: &storev1.WatchRequest_ProgressRequest{ProgressRequest: &storev1.WatchProgressRequest{}}}); err != nil {
		t.Fatal(err)
	}
	r, err = stream.Recv()
	if err != nil || !r.ProgressNotify || len(r.Events) != 0 || r.Header.Revision != 2 {
		t.Fatalf("progress response %v, %v", r, err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	// The watch keeps going after CloseSend.
	m.put(t, "a", "3")
	for {
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Events) > 0 {
			if r.Events[0].Kv.ModRevision != 3 {
				t.Fatalf("event after CloseSend %v", r.Events)
			}
			break
		}
	}
	cancel()
}

func TestStatusMembersHealthMetrics(t *testing.T) {
	cfg := testConfig(t)
	cfg.Registerer = prometheus.NewRegistry()
	m := start(t, cfg)
	m.put(t, "x", "y")
	st, err := m.maint.Status(context.Background(), &storev1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st.MemberId != DefaultID || st.LeaderId != DefaultID || st.RaftState != "Leader" || !st.Voter ||
		st.AppliedIndex == 0 || st.CommitIndex < st.AppliedIndex || st.DbSizeBytes <= 0 || st.Header.Revision != 1 || st.RaftTerm == 0 {
		t.Fatalf("status %v", st)
	}
	ml, err := storev1.NewClusterServiceClient(m.conn).MemberList(context.Background(), &storev1.MemberListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ml.Members) != 1 || ml.Members[0].Id != DefaultID || !ml.Members[0].Leader || !ml.Members[0].Voter {
		t.Fatalf("members %v", ml.Members)
	}
	h, err := healthpb.NewHealthClient(m.conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health %v, %v", h, err)
	}
	_, err = storev1.NewLeaseServiceClient(m.conn).LeaseGrant(context.Background(), &storev1.LeaseGrantRequest{})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("LeaseGrant without a TTL: %v", err)
	}
	// Metrics are registered on the injected registry and removed by Close.
	reg := cfg.Registerer.(*prometheus.Registry)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, n := range []string{"meridian_store_current_revision", "meridian_store_raft_state", "meridian_store_apply_duration_seconds", "meridian_store_db_size_bytes"} {
		if !names[n] {
			t.Errorf("metric %s missing", n)
		}
	}
	m.stop(t)
	if mfs, _ := reg.Gather(); len(mfs) != 0 {
		t.Errorf("%d metric families left after Close", len(mfs))
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := Config{PeerAddress: "127.0.0.1:0", MaxValueBytes: -1, ProgressInterval: -time.Second}
	err := c.Validate()
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, want := range []string{"DataDir", "PeerAddress", "MaxValueBytes", "ProgressInterval"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Validate error lacks %s: %v", want, err)
		}
	}
	if _, err := New(context.Background(), c); err == nil {
		t.Fatal("New accepted an invalid config")
	}
}

func TestCompactorPicksRevisionOlderThanRetention(t *testing.T) {
	var rev, compacted int64
	var calls []int64
	c := &compactor{
		retention: 5 * time.Minute, log: testLogger(),
		rev: func() int64 { return rev }, compactRev: func() int64 { return compacted },
		isLeader: func() bool { return true },
		compact: func(_ context.Context, r int64) error {
			calls = append(calls, r)
			compacted = r
			return nil
		},
	}
	t0 := time.Unix(1000, 0)
	for i := range 12 {
		rev = int64(i * 10)
		c.tick(context.Background(), t0.Add(time.Duration(i)*time.Minute))
	}
	// At minute 5 the minute-0 sample (rev 0) is old enough but there is
	// nothing to compact; from minute 6 on, each minute compacts to the
	// revision of five minutes before.
	if fmt.Sprint(calls) != "[10 20 30 40 50 60]" {
		t.Fatalf("compactions %v", calls)
	}
	if len(c.samples) > 7 {
		t.Fatalf("%d samples kept", len(c.samples))
	}
}
