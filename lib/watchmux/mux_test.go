package watchmux

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/meridian-cp/meridian/lib/grpcserver/grpcservertest"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
)

// manyReplica serves WatchMany: each watch opened gets its empty first
// message; the ids of the watches cancelled go to cancels.
type manyReplica struct {
	watchv1.UnimplementedWatchServiceServer
	cancels chan int64
}

func (r *manyReplica) WatchMany(s grpc.BidiStreamingServer[watchv1.WatchManyRequest, watchv1.WatchManyResponse]) error {
	for {
		req, err := s.Recv()
		if err != nil {
			return err
		}
		switch op := req.GetOp().(type) {
		case *watchv1.WatchManyRequest_Open:
			if err := s.Send(&watchv1.WatchManyResponse{Id: op.Open.GetId(), Response: &watchv1.WatchResponse{}}); err != nil {
				return err
			}
		case *watchv1.WatchManyRequest_Cancel:
			r.cancels <- op.Cancel
		}
	}
}

func serveMany(t *testing.T, r *manyReplica) watchv1.WatchServiceClient {
	t.Helper()
	srv := grpc.NewServer()
	watchv1.RegisterWatchServiceServer(srv, r)
	c, err := grpc.NewClient(grpcservertest.Serve(t, srv), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return watchv1.NewWatchServiceClient(c)
}

// TestCloseEndsWatch: a watch its reader closes, while its context goes
// on, is cancelled at watchfanout (its id only: the other watch of the
// stream goes on), and Recv reports it ended.
func TestCloseEndsWatch(t *testing.T) {
	r := &manyReplica{cancels: make(chan int64, 4)}
	m := New(serveMany(t, r), Options{})
	ctx := t.Context()
	a, err := m.Watch(ctx, &watchv1.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Watch(ctx, &watchv1.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []grpc.ServerStreamingClient[watchv1.WatchResponse]{a, b} {
		if _, err := s.Recv(); err != nil {
			t.Fatalf("first message: %v", err)
		}
	}
	a.(interface{ Close() }).Close()
	select {
	case id := <-r.cancels:
		if want := a.(*watchStream).id; id != want {
			t.Fatalf("watchfanout was told to cancel watch %d, want %d", id, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("closing the watch did not cancel it at watchfanout")
	}
	if _, err := a.Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("Recv after Close: %v, want CANCELED", err)
	}
	if ctx.Err() != nil || b.(*watchStream).ended {
		t.Fatal("closing one watch ended its context or the other watch")
	}
	// Closing again, or after the watch's context ended, sends nothing more.
	a.(interface{ Close() }).Close()
	b.(interface{ Close() }).Close()
	if id := <-r.cancels; id != b.(*watchStream).id {
		t.Fatalf("cancelled %d, want %d", id, b.(*watchStream).id)
	}
	select {
	case id := <-r.cancels:
		t.Fatalf("a closed watch was cancelled again: %d", id)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestFailWakesParked: a parked reader is woken by its watch's failure,
// and Recv then reports the failure ahead of a message queued before it.
func TestFailWakesParked(t *testing.T) {
	r := &manyReplica{cancels: make(chan int64, 4)}
	m := New(serveMany(t, r), Options{})
	w := openWatch(t, m)
	woken := make(chan struct{}, 2)
	if !w.Park(func() { woken <- struct{}{} }) {
		t.Fatal("an idle watch did not park")
	}
	if !w.push(&watchv1.WatchManyResponse{Id: w.id, Response: &watchv1.WatchResponse{Frames: []byte("x")}}) {
		t.Fatal("push refused")
	}
	<-woken
	w.fail(ErrTooSlow)
	if _, err := w.Recv(); err != ErrTooSlow {
		t.Fatalf("Recv: %v, want ErrTooSlow", err)
	}
	if w.Park(func() { woken <- struct{}{} }) {
		t.Fatal("a failed watch parked")
	}
}

// openWatch opens a watch on m and reads its first message.
func openWatch(t *testing.T, m *Mux) *watchStream {
	t.Helper()
	s, err := m.Watch(t.Context(), &watchv1.WatchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	return s.(*watchStream)
}
