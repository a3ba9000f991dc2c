package grpcapi

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/meridian-cp/meridian/lib/polltest"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/flowcontrolclient"
	"github.com/meridian-cp/meridian/services/apigateway/internal/watchinit"
	"github.com/meridian-cp/meridian/services/apigateway/internal/worksize"
)

// grantLedger grants each request grant "g" and counts its releases.
type grantLedger struct {
	flowcontrolv1.FlowControlServiceClient
	mu       sync.Mutex
	acquired int
	released int
}

func (l *grantLedger) Acquire(context.Context, *flowcontrolv1.AcquireRequest, ...grpc.CallOption) (*flowcontrolv1.AcquireResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acquired++
	return &flowcontrolv1.AcquireResponse{Grant: &flowcontrolv1.Grant{Id: "g", Seats: 1}}, nil
}

func (l *grantLedger) ReleaseGrants(_ context.Context, req *flowcontrolv1.ReleaseGrantsRequest, _ ...grpc.CallOption) (*flowcontrolv1.ReleaseGrantsResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.released += len(req.GetGrantIds())
	return &flowcontrolv1.ReleaseGrantsResponse{}, nil
}

func (l *grantLedger) Heartbeat(context.Context, *flowcontrolv1.HeartbeatRequest, ...grpc.CallOption) (*flowcontrolv1.HeartbeatResponse, error) {
	return &flowcontrolv1.HeartbeatResponse{Interval: durationpb.New(time.Hour)}, nil
}

func (l *grantLedger) WatchExemptions(context.Context, *flowcontrolv1.WatchExemptionsRequest, ...grpc.CallOption) (grpc.ServerStreamingClient[flowcontrolv1.WatchExemptionsResponse], error) {
	return nil, status.Error(codes.Unimplemented, "no exemptions")
}

func (l *grantLedger) counts() (acquired, released int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.acquired, l.released
}

// gatedInitialEvents is a ResourceService whose watches wait for proceed,
// send one message and report their initial events sent, then stay open
// until the client goes.
type gatedInitialEvents struct {
	recordingService
	started, proceed chan struct{}
}

func (s *gatedInitialEvents) Watch(_ *apiv1.WatchRequest, stream apiv1.ResourceService_WatchServer) error {
	s.started <- struct{}{}
	select {
	case <-s.proceed:
	case <-stream.Context().Done():
		return nil
	}
	if err := stream.Send(&httpbody.HttpBody{ContentType: "application/json", Data: []byte("{}\n")}); err != nil {
		return err
	}
	watchinit.Sent(stream.Context())
	<-stream.Context().Done()
	return nil
}

// runLedgerClient returns a flow-control client deciding against a
// grantLedger, running until the test ends.
func runLedgerClient(t *testing.T) (*grantLedger, *flowcontrolclient.Client) {
	ledger := &grantLedger{}
	fc := flowcontrolclient.New(ledger, "test", nil)
	runCtx, stopRun := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); fc.Run(runCtx) }()
	t.Cleanup(func() { stopRun(); <-ran })
	return ledger, fc
}

// TestWatchSeatsUntilInitialEvents: a gRPC Watch keeps its seat while it
// sends its initial events, gives it back once they are sent while it
// stays open, once only, and counts as a ConfigMap watcher while open.
func TestWatchSeatsUntilInitialEvents(t *testing.T) {
	ledger, fc := runLedgerClient(t)
	work := worksize.NewTracker(nil, nil, 0, nil)
	svc := &gatedInitialEvents{started: make(chan struct{}, 1), proceed: make(chan struct{})}
	c := client(t, serveConfig(t, Config{Authorizer: testPolicy(), Resources: svc, FlowControl: fc, WorkSize: work}))

	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer alice-token"))
	defer cancel()
	ws, err := c.Watch(ctx, &apiv1.WatchRequest{Ref: &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	<-svc.started
	cm := schema.GroupResource{Resource: "configmaps"}
	if n := work.Watchers(cm, "default"); n != 1 {
		t.Fatalf("%d ConfigMap watchers while the watch is open, want 1", n)
	}
	// A get's release, sent after the watch's would have been had it
	// been queued at admission.
	if _, err := c.Get(ctx, &apiv1.GetRequest{Ref: &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "default", Name: "x"}}); err != nil && status.Code(err) == codes.ResourceExhausted {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "the get's seat released", func() bool { _, r := ledger.counts(); return r >= 1 })
	if a, r := ledger.counts(); a != 2 || r != 1 {
		t.Fatalf("while the watch sends its initial events: %d acquired, %d released, want 2 and 1 (the get's)", a, r)
	}
	close(svc.proceed)
	if _, err := ws.Recv(); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "the watch's seat released while it is open", func() bool { _, r := ledger.counts(); return r == 2 })
	cancel()
	polltest.Until(t, 10*time.Second, "the watch uncounted", func() bool { return work.Watchers(cm, "default") == 0 })
	// Another get, to flush any second release of the watch's.
	gctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer alice-token")
	_, _ = c.Get(gctx, &apiv1.GetRequest{Ref: &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "default", Name: "x"}})
	polltest.Until(t, 10*time.Second, "the second get's seat released", func() bool { a, r := ledger.counts(); return a == 3 && r >= 3 })
	if _, r := ledger.counts(); r != 3 {
		t.Fatalf("%d releases for 3 grants: the watch's was released more than once", r)
	}
}

// gatedList is a ResourceService whose lists send one message, wait for
// proceed, then send another and end.
type gatedList struct {
	recordingService
	proceed chan struct{}
}

func (s *gatedList) List(_ *apiv1.ListRequest, stream apiv1.ResourceService_ListServer) error {
	for i, part := range []string{"{", "}"} {
		if i > 0 {
			select {
			case <-s.proceed:
			case <-stream.Context().Done():
				return nil
			}
		}
		if err := stream.Send(&httpbody.HttpBody{ContentType: "application/json", Data: []byte(part)}); err != nil {
			return err
		}
	}
	return nil
}

// TestListSeatsUntilSent: a gRPC List holds its seat while it sends, as
// a REST list does, and gives it back once, when its last message is
// sent.
func TestListSeatsUntilSent(t *testing.T) {
	ledger, fc := runLedgerClient(t)
	svc := &gatedList{proceed: make(chan struct{})}
	c := client(t, serveConfig(t, Config{Authorizer: testPolicy(), Resources: svc, FlowControl: fc, WorkSize: worksize.NewTracker(nil, nil, 0, nil)}))

	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer alice-token")
	ls, err := c.List(ctx, &apiv1.ListRequest{Ref: &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "default"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ls.Recv(); err != nil {
		t.Fatal(err)
	}
	// A get's release, sent after the list's would have been had the
	// list given its seat back once admitted.
	if _, err := c.Get(ctx, &apiv1.GetRequest{Ref: &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "default", Name: "x"}}); status.Code(err) == codes.ResourceExhausted {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "the get's seat released", func() bool { _, r := ledger.counts(); return r >= 1 })
	if a, r := ledger.counts(); a != 2 || r != 1 {
		t.Fatalf("while the list sends: %d acquired, %d released, want 2 and 1 (the get's)", a, r)
	}
	close(svc.proceed)
	for {
		if _, err := ls.Recv(); err != nil {
			break
		}
	}
	polltest.Until(t, 10*time.Second, "the list's seat released", func() bool { _, r := ledger.counts(); return r >= 2 })
	// Another get, to flush any second release of the list's.
	_, _ = c.Get(ctx, &apiv1.GetRequest{Ref: &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "default", Name: "x"}})
	polltest.Until(t, 10*time.Second, "the second get's seat released", func() bool { a, r := ledger.counts(); return a == 3 && r >= 3 })
	if _, r := ledger.counts(); r != 3 {
		t.Fatalf("%d releases for 3 grants: the list's was released more than once", r)
	}
}
