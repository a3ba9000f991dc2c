package resources

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/polltest"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/watchfanoutclient"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// cutReplica is a watchfanout replica that sends one initial event of
// every watch and then goes away (UNAVAILABLE), and counts the watches it
// was asked for.
type cutReplica struct {
	watchv1.UnimplementedWatchServiceServer
	watches chan *watchv1.WatchRequest
}

const cutEvent = `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"3"}}}` + "\n"

func (r *cutReplica) Watch(req *watchv1.WatchRequest, s grpc.ServerStreamingServer[watchv1.WatchResponse]) error {
	r.watches <- req
	if err := s.Send(&watchv1.WatchResponse{}); err != nil {
		return err
	}
	if err := s.Send(&watchv1.WatchResponse{Frames: []byte(cutEvent), ResourceVersion: "3"}); err != nil {
		return err
	}
	return grpcstatus.Error(codes.Unavailable, "replica went away")
}

// sentStream collects what a Watch sends.
type sentStream struct {
	grpc.ServerStream
	ctx  context.Context
	data bytes.Buffer
}

func (s *sentStream) Context() context.Context { return s.ctx }

func (s *sentStream) Send(b *httpbody.HttpBody) error {
	s.data.Write(b.GetData())
	return nil
}

// TestWatchInitialEventsCutIsExpired: a watch with sendInitialEvents=true
// whose replica goes away after it sent some of the initial events, not
// all, cannot go on anywhere (the rest of that snapshot is gone, and a new
// one would not line up with what the client holds): the client gets the
// events sent, then an ERROR event with 410 Expired, so that it lists
// again; no other replica or the store is asked to go on.
func TestWatchInitialEventsCutIsExpired(t *testing.T) {
	r := &cutReplica{watches: make(chan *watchv1.WatchRequest, 10)}
	var conns []*grpc.ClientConn
	for range 2 {
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
		conns = append(conns, conn)
	}
	reg := prometheus.NewRegistry()
	e := newEnv(t, Config{Watchfanout: watchfanoutclient.New(conns), Registerer: reg})
	yes := true
	stream := &sentStream{ctx: t.Context()}
	err := e.s.Watch(&apiv1.WatchRequest{
		Ref: configMap("ns", ""), SendInitialEvents: &yes, ResourceVersionMatch: "NotOlderThan",
		AllowWatchBookmarks: true, Accept: acceptJSON,
	}, stream)
	if err != nil {
		t.Fatal(err)
	}
	body := stream.data.String()
	lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
	if len(lines) != 2 || lines[0]+"\n" != cutEvent {
		t.Fatalf("the client got\n%s\nwant the event sent, then an ERROR", body)
	}
	var ev struct {
		Type   string        `json:"type"`
		Object metav1.Status `json:"object"`
	}
	if err := json.Unmarshal([]byte(lines[1]), &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Type != "ERROR" || ev.Object.Code != 410 || ev.Object.Reason != metav1.StatusReasonExpired {
		t.Fatalf("last event %s, want an ERROR with 410 Expired", lines[1])
	}
	if n := len(r.watches); n != 1 {
		t.Fatalf("replicas were asked for %d watches, want 1", n)
	}
	if n := testutil.ToFloat64(e.s.m.watchResumes.WithLabelValues("configmaps", resumeExpired)); n != 1 {
		t.Fatalf("meridian_apigateway_watch_resumes_total{to=expired} is %v, want 1", n)
	}
}

// TestRelayedWatchFallsBackAsAsked: a watch no replica takes is served
// by the store with the client's own parameters: sendInitialEvents=true
// (resourceVersionMatch NotOlderThan) sends the objects of the watch's
// namespace, none of another, and then the initial-events-end bookmark.
func TestRelayedWatchFallsBackAsAsked(t *testing.T) {
	e, r := newRoutingEnv(t)
	for _, ns := range []string{"ns", "other"} {
		e.namespace(ns)
		e.mustCreate(configMap(ns, ""), `{"metadata":{"name":"in-`+ns+`"}}`)
	}
	ctx, cancel := context.WithCancel(t.Context())
	stream, done := watchInitialEvents(ctx, e)
	polltest.Until(t, 10*time.Second, "the initial events, or an ERROR", func() bool {
		data, _ := stream.state()
		return strings.Contains(data, initialEventsEndAnnotation) || strings.Contains(data, `"type":"ERROR"`)
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	data, _ := stream.state()
	lines := strings.Split(strings.TrimSuffix(data, "\n"), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"type":"ADDED"`) || !strings.Contains(lines[0], `"name":"in-ns"`) ||
		!strings.Contains(lines[1], `"type":"BOOKMARK"`) || !strings.Contains(lines[1], initialEventsEndAnnotation) {
		t.Fatalf("the client got\n%s\nwant in-ns ADDED, then the initial-events-end BOOKMARK", data)
	}
	if called := r.called(); len(called) == 0 {
		t.Fatal("the replica was not asked for the watch")
	}
}
