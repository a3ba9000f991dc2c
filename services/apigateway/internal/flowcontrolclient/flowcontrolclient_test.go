package flowcontrolclient

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/polltest"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// fakeFlowControl grants every request and records releases. While gate
// is set, release calls wait for it to close. Without batch it answers
// ReleaseGrants UNIMPLEMENTED, as a service older than that call does.
type fakeFlowControl struct {
	flowcontrolv1.UnimplementedFlowControlServiceServer
	batch bool
	// exemptions, when set, are sent on WatchExemptions streams, which
	// end with UNAVAILABLE when breakStreams is closed; nil answers
	// UNIMPLEMENTED, as a service older than that call does.
	exemptions   []*flowcontrolv1.Exemption
	breakStreams chan struct{}
	acquires     atomic.Int64

	mu       sync.Mutex
	next     int
	released map[string]int // grant id → times released
	calls    int            // release calls (Release or ReleaseGrants)
	gate     chan struct{}
	// term is the term its answers name ("" none, as a service older
	// than terms); adopted are the grant ids of each AdoptGrants call.
	term    string
	adopted [][]string
	// newTerm makes Acquire answer NEW_TERM to a request naming another
	// term than term, as the service does; events are the grants,
	// NEW_TERM answers and AdoptGrants calls, in order.
	newTerm bool
	events  []string
	// refuseStreams makes the server refuse every stream
	// PERMISSION_DENIED, as a service whose access policy predates
	// Decide does.
	refuseStreams bool
}

func (f *fakeFlowControl) WatchExemptions(_ *flowcontrolv1.WatchExemptionsRequest, stream grpc.ServerStreamingServer[flowcontrolv1.WatchExemptionsResponse]) error {
	if f.exemptions == nil {
		return status.Error(codes.Unimplemented, "unknown method")
	}
	select {
	case <-f.breakStreams:
		return status.Error(codes.Unavailable, "broken")
	default:
	}
	if err := stream.Send(&flowcontrolv1.WatchExemptionsResponse{Exemptions: f.exemptions}); err != nil {
		return err
	}
	select {
	case <-stream.Context().Done():
		return stream.Context().Err()
	case <-f.breakStreams:
		return status.Error(codes.Unavailable, "broken")
	}
}

func (f *fakeFlowControl) Acquire(_ context.Context, req *flowcontrolv1.AcquireRequest) (*flowcontrolv1.AcquireResponse, error) {
	f.acquires.Add(1)
	if req.GetDigest().GetUser() == "admin" {
		return &flowcontrolv1.AcquireResponse{Grant: &flowcontrolv1.Grant{Exempt: true}}, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.newTerm && req.GetTerm() != "" && req.GetTerm() != f.term {
		// As the service: nothing for a gateway that heard another term.
		f.events = append(f.events, "new-term")
		st, err := status.New(codes.Aborted, "new term").WithDetails(&errdetails.ErrorInfo{
			Reason: newTermReason, Metadata: map[string]string{"term": f.term},
		})
		if err != nil {
			panic(err)
		}
		return nil, st.Err()
	}
	f.next++
	f.events = append(f.events, fmt.Sprintf("grant g-%d", f.next))
	return &flowcontrolv1.AcquireResponse{Term: f.term, Grant: &flowcontrolv1.Grant{Id: fmt.Sprintf("g-%d", f.next), Seats: 1, PriorityLevel: "pl"}}, nil
}

func (f *fakeFlowControl) AdoptGrants(_ context.Context, req *flowcontrolv1.AdoptGrantsRequest) (*flowcontrolv1.AdoptGrantsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for _, g := range req.GetGrants() {
		ids = append(ids, g.GetId())
	}
	f.adopted = append(f.adopted, ids)
	f.events = append(f.events, "adopt")
	return &flowcontrolv1.AdoptGrantsResponse{Term: f.term, Adopted: uint32(len(ids))}, nil
}

func (f *fakeFlowControl) wait() {
	f.mu.Lock()
	gate := f.gate
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
}

func (f *fakeFlowControl) record(ids ...string) (released, notFound uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	for _, id := range ids {
		if f.released[id] > 0 {
			notFound++
		} else {
			released++
		}
		f.released[id]++
	}
	return released, notFound
}

func (f *fakeFlowControl) Release(_ context.Context, req *flowcontrolv1.ReleaseRequest) (*flowcontrolv1.ReleaseResponse, error) {
	f.wait()
	if _, nf := f.record(req.GetGrantId()); nf > 0 {
		return nil, status.Error(codes.NotFound, "not held")
	}
	return &flowcontrolv1.ReleaseResponse{}, nil
}

func (f *fakeFlowControl) ReleaseGrants(_ context.Context, req *flowcontrolv1.ReleaseGrantsRequest) (*flowcontrolv1.ReleaseGrantsResponse, error) {
	if !f.batch {
		return nil, status.Error(codes.Unimplemented, "unknown method")
	}
	f.wait()
	r, nf := f.record(req.GetGrantIds()...)
	return &flowcontrolv1.ReleaseGrantsResponse{Released: r, NotFound: nf}, nil
}

func (f *fakeFlowControl) Heartbeat(context.Context, *flowcontrolv1.HeartbeatRequest) (*flowcontrolv1.HeartbeatResponse, error) {
	return &flowcontrolv1.HeartbeatResponse{}, nil
}

// snapshot returns the releases so far and the number of release calls.
func (f *fakeFlowControl) snapshot() (map[string]int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]int, len(f.released))
	for k, v := range f.released {
		out[k] = v
	}
	return out, f.calls
}

// start serves f over real gRPC on an in-memory listener and returns a
// Client of it whose Run runs until the returned stop is called.
func start(t *testing.T, f *fakeFlowControl, run bool) (*Client, func()) {
	t.Helper()
	f.released = map[string]int{}
	var opts []grpc.ServerOption
	if f.refuseStreams {
		opts = append(opts, grpc.StreamInterceptor(func(any, grpc.ServerStream, *grpc.StreamServerInfo, grpc.StreamHandler) error {
			return status.Error(codes.PermissionDenied, "open to no caller")
		}))
	}
	srv := grpc.NewServer(opts...)
	flowcontrolv1.RegisterFlowControlServiceServer(srv, f)
	lis := bufconn.Listen(1 << 20)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///fc",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	// The fake serves no Decide stream: the client, given the
	// connection, finds so and makes unary calls.
	c := NewReplicas([]Replica{{Client: flowcontrolv1.NewFlowControlServiceClient(conn), Conn: conn}}, "gw-test", nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	if run {
		go func() { defer close(done); c.Run(ctx) }()
	} else {
		close(done)
	}
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return c, stop
}

func acquireN(t *testing.T, c *Client, n int) []Grant {
	t.Helper()
	var gs []Grant
	for range n {
		g, err := c.Acquire(t.Context(), &flowcontrolv1.RequestDigest{Verb: "get", IsResourceRequest: true})
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
	}
	return gs
}

// TestReleaseDoesNotWait: Release returns while the service is stuck, and
// every grant is released exactly once when it answers, in fewer calls
// than grants (the queued ones go together).
func TestReleaseDoesNotWait(t *testing.T) {
	f := &fakeFlowControl{batch: true, gate: make(chan struct{})}
	c, _ := start(t, f, true)
	gs := acquireN(t, c, 50)
	for _, g := range gs {
		done := make(chan struct{})
		go func() { g.Release(); g.Release(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Release waited for the flow-control service")
		}
	}
	f.mu.Lock()
	close(f.gate)
	f.gate = nil
	f.mu.Unlock()
	polltest.Until(t, 10*time.Second, "50 releases", func() bool { r, _ := f.snapshot(); return len(r) == 50 })
	r, calls := f.snapshot()
	for id, n := range r {
		if n != 1 {
			t.Errorf("grant %s released %d times", id, n)
		}
	}
	if calls >= 50 {
		t.Errorf("%d release calls for 50 grants queued behind a stuck one: no batching", calls)
	}
}

// TestReleaseOnceConcurrently: concurrent calls of one grant's Release
// release it once.
func TestReleaseOnceConcurrently(t *testing.T) {
	f := &fakeFlowControl{batch: true}
	c, stop := start(t, f, true)
	gs := acquireN(t, c, 20)
	var wg sync.WaitGroup
	for _, g := range gs {
		for range 4 {
			wg.Add(1)
			go func() { defer wg.Done(); g.Release() }()
		}
	}
	wg.Wait()
	stop() // drains the queue
	r, _ := f.snapshot()
	if len(r) != 20 {
		t.Fatalf("%d grants released, want 20", len(r))
	}
	for id, n := range r {
		if n != 1 {
			t.Errorf("grant %s released %d times", id, n)
		}
	}
}

// TestOlderServiceReleasesOneByOne: a service without ReleaseGrants gets
// one Release per grant.
func TestOlderServiceReleasesOneByOne(t *testing.T) {
	f := &fakeFlowControl{}
	c, _ := start(t, f, true)
	for _, g := range acquireN(t, c, 10) {
		g.Release()
	}
	polltest.Until(t, 10*time.Second, "10 releases", func() bool { r, _ := f.snapshot(); return len(r) == 10 })
	if r, _ := f.snapshot(); len(r) != 10 {
		t.Fatalf("released %v", r)
	}
}

// TestFullQueueReleasesInline: with the sender not running, the grants
// beyond the queue's capacity are released by the caller, so none is
// lost and memory stays bounded.
func TestFullQueueReleasesInline(t *testing.T) {
	f := &fakeFlowControl{batch: true}
	c, _ := start(t, f, false)
	gs := acquireN(t, c, queueSize+3)
	for _, g := range gs {
		g.Release()
	}
	if r, _ := f.snapshot(); len(r) != 3 {
		t.Fatalf("%d released inline, want the 3 beyond the queue", len(r))
	}
	if n := len(c.queue); n != queueSize {
		t.Fatalf("%d queued, want %d", n, queueSize)
	}
}

// TestNothingToRelease: exempt grants and a nil Client (no flow control)
// send nothing.
func TestNothingToRelease(t *testing.T) {
	f := &fakeFlowControl{batch: true}
	c, stop := start(t, f, true)
	g, err := c.Acquire(t.Context(), &flowcontrolv1.RequestDigest{User: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	g.Release()
	var nilClient *Client
	if g, err = nilClient.Acquire(t.Context(), &flowcontrolv1.RequestDigest{}); err != nil {
		t.Fatal(err)
	}
	g.Release()
	nilClient.Run(t.Context())
	stop()
	if _, calls := f.snapshot(); calls != 0 {
		t.Fatalf("%d release calls, want none", calls)
	}
}

// TestExemptCallersSkipAcquire: once the client holds the service's
// exemptions, requests of the callers they list are granted without a
// call, with the exemption's flow schema and priority level; others, and
// everyone while the client holds no list, ask the service.
func TestExemptCallersSkipAcquire(t *testing.T) {
	f := &fakeFlowControl{batch: true, breakStreams: make(chan struct{}), exemptions: []*flowcontrolv1.Exemption{
		{FlowSchema: "exempt", FlowSchemaUid: "fs-exempt", PriorityLevel: "exempt", PriorityLevelUid: "pl-exempt", Groups: []string{"system:masters"}},
		{FlowSchema: "ops", FlowSchemaUid: "fs-ops", PriorityLevel: "exempt", PriorityLevelUid: "pl-exempt", Users: []string{"ops"}, Groups: []string{"operators"}},
	}}
	c, _ := start(t, f, true)
	acquire := func(user string, groups ...string) Grant {
		t.Helper()
		g, err := c.Acquire(t.Context(), &flowcontrolv1.RequestDigest{User: user, Groups: groups, Verb: "create", IsResourceRequest: true})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	polltest.Until(t, 10*time.Second, "exemptions synced", c.ExemptionsSynced)
	before := f.acquires.Load()
	for _, tc := range []struct {
		user   string
		groups []string
		fs     string
	}{
		{"root", []string{"system:masters", "system:authenticated"}, "fs-exempt"},
		{"ops", nil, "fs-ops"},
		{"bob", []string{"operators", "system:masters"}, "fs-exempt"}, // the first in order
		{"carol", []string{"operators"}, "fs-ops"},
	} {
		g := acquire(tc.user, tc.groups...)
		if g.FlowSchemaUID != tc.fs || g.PriorityLevelUID != "pl-exempt" {
			t.Errorf("%s %v: grant %+v, want flow schema %s", tc.user, tc.groups, g, tc.fs)
		}
		g.Release()
	}
	if n := f.acquires.Load() - before; n != 0 {
		t.Fatalf("%d Acquire calls for exempt callers", n)
	}
	acquire("alice", "system:authenticated").Release()
	if n := f.acquires.Load() - before; n != 1 {
		t.Fatalf("%d Acquire calls for a limited caller, want 1", n)
	}

	// The stream breaks (and stays broken): every request asks again.
	close(f.breakStreams)
	polltest.Until(t, 10*time.Second, "exemptions lost", func() bool { return !c.ExemptionsSynced() })
	before = f.acquires.Load()
	acquire("root", "system:masters").Release()
	if n := f.acquires.Load() - before; n != 1 {
		t.Fatalf("%d Acquire calls for an exempt caller without exemptions, want 1", n)
	}
}

// TestServiceWithoutDecide: a service that does not serve the Decide
// stream (it answers UNIMPLEMENTED), or does not serve it to this
// gateway (PERMISSION_DENIED), gets unary Acquire and ReleaseGrants
// calls: every request is granted, every grant released once, and no
// stream stays open.
func TestServiceWithoutDecide(t *testing.T) {
	t.Run("unimplemented", func(t *testing.T) { testServiceWithoutDecide(t, &fakeFlowControl{batch: true}) })
	t.Run("permission denied", func(t *testing.T) { testServiceWithoutDecide(t, &fakeFlowControl{batch: true, refuseStreams: true}) })
}

func testServiceWithoutDecide(t *testing.T, f *fakeFlowControl) {
	c, _ := start(t, f, true)
	for _, g := range acquireN(t, c, 5) {
		g.Release()
	}
	if n := f.acquires.Load(); n != 5 {
		t.Fatalf("%d unary Acquire calls, want 5", n)
	}
	polltest.Until(t, 10*time.Second, "5 releases", func() bool { r, _ := f.snapshot(); return len(r) == 5 })
	if r, _ := f.snapshot(); len(r) != 5 || r["g-1"] != 1 || r["g-5"] != 1 {
		t.Fatalf("released %v, want g-1…g-5 once each", r)
	}
	if n := c.streaming(); n != 0 {
		t.Fatalf("%d Decide streams open on a service without Decide", n)
	}
}
