package resources

import (
	"bytes"
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meridian-cp/meridian/lib/polltest"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/watchfanoutclient"
	"github.com/meridian-cp/meridian/services/apigateway/internal/watchinit"
)

// signalStream collects what a Watch sends, and what it had sent when
// watchinit.Sent ran.
type signalStream struct {
	grpc.ServerStream
	ctx     context.Context
	mu      sync.Mutex
	data    bytes.Buffer
	signals []string // the data sent at each signal
}

func newSignalStream(ctx context.Context) *signalStream {
	s := &signalStream{}
	s.ctx = watchinit.With(ctx, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.signals = append(s.signals, s.data.String())
	})
	return s
}

func (s *signalStream) Context() context.Context { return s.ctx }

// watchInitialEvents starts a watch of namespace "ns"'s ConfigMaps with
// sendInitialEvents=true on e's Server, under ctx; done gets what Watch
// returned.
func watchInitialEvents(ctx context.Context, e *env) (stream *signalStream, done chan error) {
	yes := true
	stream, done = newSignalStream(ctx), make(chan error, 1)
	go func() {
		done <- e.s.Watch(&apiv1.WatchRequest{
			Ref: configMap("ns", ""), SendInitialEvents: &yes, ResourceVersionMatch: "NotOlderThan",
			AllowWatchBookmarks: true, Accept: acceptJSON,
		}, stream)
	}()
	return stream, done
}

func (s *signalStream) Send(b *httpbody.HttpBody) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data.Write(b.GetData())
	return nil
}

func (s *signalStream) state() (string, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.data.String(), append([]string(nil), s.signals...)
}

// TestWatchSignalsInitialEventsSent: a watch served by the store calls
// watchinit.Sent once, when it has sent its initial events — with
// sendInitialEvents=true the ADDED events and the initial-events-end
// bookmark, the legacy way (resourceVersion unset) the ADDED events — or
// at once for a watch of the changes after a resourceVersion; the events
// after that are sent without another signal.
func TestWatchSignalsInitialEventsSent(t *testing.T) {
	e := newEnv(t, Config{})
	e.namespace("ns")
	e.mustCreate(configMap("ns", ""), `{"metadata":{"name":"a"}}`)
	e.mustCreate(configMap("ns", ""), `{"metadata":{"name":"b"}}`)
	yes := true
	existing := 2 // the ConfigMaps of ns
	for _, tc := range []struct {
		name string
		req  *apiv1.WatchRequest
		// initial is whether the signal follows the ADDED events of
		// every ConfigMap; bookmark whether it follows the
		// initial-events-end bookmark too.
		initial  bool
		bookmark bool
	}{
		{"sendInitialEvents", &apiv1.WatchRequest{SendInitialEvents: &yes, ResourceVersionMatch: "NotOlderThan", AllowWatchBookmarks: true}, true, true},
		{"legacy", &apiv1.WatchRequest{}, true, false},
		{"changes only", &apiv1.WatchRequest{}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req.Ref, tc.req.Accept = configMap("ns", ""), acceptJSON
			want := 0
			if tc.initial {
				want = existing
			} else {
				tc.req.ResourceVersion = strconv.FormatInt(e.revision(), 10)
			}
			ctx, cancel := context.WithCancel(t.Context())
			stream := newSignalStream(ctx)
			done := make(chan error, 1)
			go func() { done <- e.s.Watch(tc.req, stream) }()
			polltest.Until(t, 10*time.Second, "the signal", func() bool { _, sig := stream.state(); return len(sig) > 0 })
			_, sig := stream.state()
			if got := strings.Count(sig[0], `"type":"ADDED"`); got != want {
				t.Errorf("signalled after %d ADDED events, want %d:\n%s", got, want, sig[0])
			}
			if got := strings.Contains(sig[0], "k8s.io/initial-events-end"); got != tc.bookmark {
				t.Errorf("signalled after the initial-events-end bookmark: %v, want %v:\n%s", got, tc.bookmark, sig[0])
			}
			name := "later-" + strings.ReplaceAll(tc.name, " ", "-")
			e.mustCreate(configMap("ns", ""), `{"metadata":{"name":"`+strings.ToLower(name)+`"}}`)
			existing++
			polltest.Until(t, 10*time.Second, "the later event", func() bool {
				data, _ := stream.state()
				return strings.Contains(data, strings.ToLower(name))
			})
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if _, sig := stream.state(); len(sig) != 1 {
				t.Fatalf("%d signals, want 1", len(sig))
			}
		})
	}
}

// initialThenLive is a watchfanout replica that sends a watch's initial
// event and initial-events-end bookmark, then, once next is closed, a
// later event, and stays open until the client goes.
type initialThenLive struct {
	watchv1.UnimplementedWatchServiceServer
	next chan struct{}
}

const (
	relayAdded    = `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"3"}}}` + "\n"
	relayBookmark = `{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"3","annotations":{"k8s.io/initial-events-end":"true"}}}}` + "\n"
	relayLater    = `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"later","namespace":"ns","resourceVersion":"4"}}}` + "\n"
)

func (r *initialThenLive) Watch(_ *watchv1.WatchRequest, s grpc.ServerStreamingServer[watchv1.WatchResponse]) error {
	if err := s.Send(&watchv1.WatchResponse{}); err != nil {
		return err
	}
	if err := s.Send(&watchv1.WatchResponse{Frames: []byte(relayAdded + relayBookmark), ResourceVersion: "3"}); err != nil {
		return err
	}
	select {
	case <-r.next:
	case <-s.Context().Done():
		return nil
	}
	if err := s.Send(&watchv1.WatchResponse{Frames: []byte(relayLater), ResourceVersion: "4"}); err != nil {
		return err
	}
	<-s.Context().Done()
	return nil
}

// TestRelayedWatchSignalsInitialEventsSent: a watch watchfanout serves
// calls watchinit.Sent once, after the initial events and their
// initial-events-end bookmark have been sent to the client, not before.
func TestRelayedWatchSignalsInitialEventsSent(t *testing.T) {
	r := &initialThenLive{next: make(chan struct{})}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	watchv1.RegisterWatchServiceServer(srv, r)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	e := newEnv(t, Config{Watchfanout: watchfanoutclient.New([]*grpc.ClientConn{conn})})
	ctx, cancel := context.WithCancel(t.Context())
	stream, done := watchInitialEvents(ctx, e)
	polltest.Until(t, 10*time.Second, "the signal", func() bool { _, sig := stream.state(); return len(sig) > 0 })
	if _, sig := stream.state(); sig[0] != relayAdded+relayBookmark {
		t.Fatalf("signalled after\n%q\nwant after the initial event and its bookmark", sig[0])
	}
	close(r.next)
	polltest.Until(t, 10*time.Second, "the later event", func() bool { data, _ := stream.state(); return strings.HasSuffix(data, relayLater) })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, sig := stream.state(); len(sig) != 1 {
		t.Fatalf("%d signals, want 1", len(sig))
	}
}
