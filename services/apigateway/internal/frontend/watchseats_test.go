package frontend

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
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

// seatLedger is a flow-control service that grants every request a
// numbered grant and records the digests asked and the grants released.
type seatLedger struct {
	flowcontrolv1.FlowControlServiceClient
	mu       sync.Mutex
	digests  map[string]*flowcontrolv1.RequestDigest // by grant id
	released map[string]int
	next     int
}

func newSeatLedger() *seatLedger {
	return &seatLedger{digests: map[string]*flowcontrolv1.RequestDigest{}, released: map[string]int{}}
}

func (l *seatLedger) Acquire(_ context.Context, req *flowcontrolv1.AcquireRequest, _ ...grpc.CallOption) (*flowcontrolv1.AcquireResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next++
	id := req.GetDigest().GetVerb() + "-" + strings.Repeat("i", l.next)
	l.digests[id] = req.GetDigest()
	return &flowcontrolv1.AcquireResponse{Grant: &flowcontrolv1.Grant{Id: id, Seats: 1}}, nil
}

func (l *seatLedger) ReleaseGrants(_ context.Context, req *flowcontrolv1.ReleaseGrantsRequest, _ ...grpc.CallOption) (*flowcontrolv1.ReleaseGrantsResponse, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range req.GetGrantIds() {
		l.released[id]++
	}
	return &flowcontrolv1.ReleaseGrantsResponse{Released: uint32(len(req.GetGrantIds()))}, nil
}

func (l *seatLedger) Heartbeat(context.Context, *flowcontrolv1.HeartbeatRequest, ...grpc.CallOption) (*flowcontrolv1.HeartbeatResponse, error) {
	return &flowcontrolv1.HeartbeatResponse{Interval: durationpb.New(time.Hour)}, nil
}

func (l *seatLedger) WatchExemptions(context.Context, *flowcontrolv1.WatchExemptionsRequest, ...grpc.CallOption) (grpc.ServerStreamingClient[flowcontrolv1.WatchExemptionsResponse], error) {
	return nil, status.Error(codes.Unimplemented, "no exemptions")
}

// grants returns the ids of the grants of verb, and how often each was
// released.
func (l *seatLedger) grants(verb string) (ids []string, released map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	released = map[string]int{}
	for id, d := range l.digests {
		if d.GetVerb() == verb {
			ids = append(ids, id)
			released[id] = l.released[id]
		}
	}
	return ids, released
}

// digest returns the digest of the last request of verb.
func (l *seatLedger) last(verb string) *flowcontrolv1.RequestDigest {
	l.mu.Lock()
	defer l.mu.Unlock()
	best := ""
	for id, d := range l.digests {
		if d.GetVerb() == verb && len(id) > len(best) {
			best = id
		}
	}
	return l.digests[best]
}

// slowInitialEvents is a ResourceService whose watches send their
// headers, wait for proceed, send one ADDED event and report their
// initial events sent (watchinit.Sent), then stay open until the client
// goes.
type slowInitialEvents struct {
	recordingService
	started chan struct{}
	proceed chan struct{}
}

const addedEvent = `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"demo","resourceVersion":"3"}}}` + "\n"

func (s *slowInitialEvents) Watch(_ *apiv1.WatchRequest, stream apiv1.ResourceService_WatchServer) error {
	if err := stream.Send(&httpbody.HttpBody{ContentType: "application/json"}); err != nil {
		return err
	}
	s.started <- struct{}{}
	select {
	case <-s.proceed:
	case <-stream.Context().Done():
		return nil
	}
	if err := stream.Send(&httpbody.HttpBody{ContentType: "application/json", Data: []byte(addedEvent)}); err != nil {
		return err
	}
	watchinit.Sent(stream.Context())
	<-stream.Context().Done()
	return nil
}

// seatsEnv is a front end over slowInitialEvents, taking seats from a
// seatLedger through a running flowcontrolclient.
type seatsEnv struct {
	t      *testing.T
	svc    *slowInitialEvents
	ledger *seatLedger
	srv    *httptest.Server
	work   *worksize.Tracker
}

// newSeatsEnv starts a seatsEnv; wrap, when given, makes the service
// the front end asks of the ledger.
func newSeatsEnv(t *testing.T, wrap ...func(*seatLedger) flowcontrolv1.FlowControlServiceClient) *seatsEnv {
	e := &seatsEnv{t: t, svc: &slowInitialEvents{started: make(chan struct{}, 100), proceed: make(chan struct{})}, ledger: newSeatLedger()}
	e.work = worksize.NewTracker(nil, nil, 0, nil)
	var svc flowcontrolv1.FlowControlServiceClient = e.ledger
	for _, w := range wrap {
		svc = w(e.ledger)
	}
	fc := flowcontrolclient.New(svc, "test", nil)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); fc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-ran })
	h := newTestHandler(t, &e.svc.recordingService, nil, func(c *Config) {
		c.LocalResources = e.svc
		c.FlowControl = fc
		c.WorkSize = e.work
	})
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	return e
}

// do sends a request as admin and returns the response, open.
func (e *seatsEnv) do(ctx context.Context, method, path, body string) *http.Response {
	e.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer admin-token")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp
}

// settle waits until a get's grant has been released: releases go out
// in order, so every release queued before it has been sent too.
func (e *seatsEnv) settle() {
	e.t.Helper()
	resp := e.do(e.t.Context(), "GET", "/api/v1/namespaces/demo/configmaps/x", "")
	resp.Body.Close()
	polltest.Until(e.t, 10*time.Second, "the get's seat released", func() bool {
		ids, released := e.ledger.grants("get")
		for _, id := range ids {
			if released[id] == 0 {
				return false
			}
		}
		return len(ids) > 0
	})
}

// TestWatchHoldsSeatsWhileSendingInitialEvents: a watch keeps its seat
// while it sends its initial events, gives it back once it has sent them
// while it stays open, and gives it back once only.
func TestWatchHoldsSeatsWhileSendingInitialEvents(t *testing.T) {
	e := newSeatsEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	watch := e.do(ctx, "GET", "/api/v1/namespaces/demo/configmaps?watch=1", "")
	defer watch.Body.Close()
	if watch.StatusCode != http.StatusOK {
		t.Fatalf("watch: %d", watch.StatusCode)
	}
	<-e.svc.started
	e.settle()
	ids, released := e.ledger.grants("watch")
	if len(ids) != 1 || released[ids[0]] != 0 {
		t.Fatalf("while the watch sends its initial events: grants %v released %v, want one held", ids, released)
	}
	close(e.svc.proceed)
	line, err := bufio.NewReader(watch.Body).ReadString('\n')
	if err != nil || line != addedEvent {
		t.Fatalf("watch event %q, %v", line, err)
	}
	polltest.Until(t, 10*time.Second, "the watch's seat released while it is open", func() bool {
		_, released := e.ledger.grants("watch")
		return released[ids[0]] == 1
	})
	cancel()
	watch.Body.Close()
	e.settle()
	if _, released := e.ledger.grants("watch"); released[ids[0]] != 1 {
		t.Fatalf("the watch's grant was released %d times, want 1", released[ids[0]])
	}
}

// TestWriteChargedForWatchers: a create of a ConfigMap is asked with the
// final seats and additional latency of the notifications to the
// ConfigMap watches the gateway serves — none without watches, one seat
// for 5ms with 10 — and the count follows the watches as they end.
func TestWriteChargedForWatchers(t *testing.T) {
	e := newSeatsEnv(t)
	close(e.svc.proceed)
	create := func() *flowcontrolv1.RequestDigest {
		t.Helper()
		resp := e.do(t.Context(), "POST", "/api/v1/namespaces/demo/configmaps", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
			t.Fatalf("create: %d", resp.StatusCode)
		}
		return e.ledger.last("create")
	}
	if d := create(); d.GetFinalSeats() != 0 || d.GetAdditionalLatency() != nil {
		t.Fatalf("a create without watchers: final seats %d, latency %v", d.GetFinalSeats(), d.GetAdditionalLatency())
	}
	ctx, cancel := context.WithCancel(t.Context())
	for range 10 {
		resp := e.do(ctx, "GET", "/api/v1/namespaces/demo/configmaps?watch=1", "")
		defer resp.Body.Close()
		<-e.svc.started
	}
	cm := schema.GroupResource{Resource: "configmaps"}
	if n := e.work.Watchers(cm, "demo"); n != 10 {
		t.Fatalf("%d watchers counted, want 10", n)
	}
	if d := create(); d.GetFinalSeats() != 1 || d.GetAdditionalLatency().AsDuration() != 5*time.Millisecond {
		t.Fatalf("a create with 10 watchers: final seats %d, latency %v, want 1 and 5ms", d.GetFinalSeats(), d.GetAdditionalLatency())
	}
	cancel()
	polltest.Until(t, 10*time.Second, "the watches uncounted", func() bool { return e.work.Watchers(cm, "demo") == 0 })
	if d := create(); d.GetFinalSeats() != 0 {
		t.Fatalf("a create after the watches ended: final seats %d", d.GetFinalSeats())
	}
}
