package watchfanoutclient

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// replica is a watchfanout stand-in that answers with its own name, so the
// test can see which replica a call reached; unavailable answers every
// call UNAVAILABLE, as a replica whose cache has not synced does.
type replica struct {
	watchv1.UnimplementedWatchServiceServer
	name        string
	unavailable bool
}

var errNotSynced = status.Error(codes.Unavailable, "the watch cache is not synced with the store yet")

func (r *replica) Get(context.Context, *watchv1.GetRequest) (*watchv1.GetResponse, error) {
	if r.unavailable {
		return nil, errNotSynced
	}
	return &watchv1.GetResponse{ResourceVersion: r.name}, nil
}

func (r *replica) List(context.Context, *watchv1.ListRequest) (*watchv1.ListResponse, error) {
	if r.unavailable {
		return nil, errNotSynced
	}
	return &watchv1.ListResponse{ResourceVersion: r.name}, nil
}

// Watch sends the empty first message, then one with the replica's name,
// and ends.
func (r *replica) Watch(_ *watchv1.WatchRequest, s grpc.ServerStreamingServer[watchv1.WatchResponse]) error {
	if r.unavailable {
		return errNotSynced
	}
	if err := s.Send(&watchv1.WatchResponse{}); err != nil {
		return err
	}
	return s.Send(&watchv1.WatchResponse{Frames: []byte(r.name)})
}

// StreamList sends the replica's name, then its data, and ends.
func (r *replica) StreamList(_ *watchv1.StreamListRequest, s grpc.ServerStreamingServer[watchv1.StreamListResponse]) error {
	if r.unavailable {
		return errNotSynced
	}
	if err := s.Send(&watchv1.StreamListResponse{ResourceVersion: r.name, Data: []byte("{")}); err != nil {
		return err
	}
	return s.Send(&watchv1.StreamListResponse{Data: []byte(r.name + "}")})
}

func serve(t *testing.T, name string) (*grpc.Server, string) {
	t.Helper()
	return serveReplica(t, &replica{name: name})
}

func serveReplica(t *testing.T, r *replica) (*grpc.Server, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	watchv1.RegisterWatchServiceServer(srv, r)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return srv, lis.Addr().String()
}

// dial returns a plaintext connection to each address, closed when the
// test ends.
func dial(t *testing.T, addrs ...string) []*grpc.ClientConn {
	t.Helper()
	var conns []*grpc.ClientConn
	for _, addr := range addrs {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
	}
	return conns
}

// TestPoolMovesToHealthyReplica: calls spread over the replicas; when one
// goes away, every later call reaches the one that is left.
func TestPoolMovesToHealthyReplica(t *testing.T) {
	a, addrA := serve(t, "a")
	_, addrB := serve(t, "b")
	conns := dial(t, addrA, addrB)
	p := New(conns)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	seen := map[string]int{}
	for i := 0; i < 10; i++ {
		resp, err := p.Client().Get(ctx, &watchv1.GetRequest{})
		if err != nil {
			t.Fatal(err)
		}
		seen[resp.GetResourceVersion()]++
	}
	if seen["a"] == 0 || seen["b"] == 0 {
		t.Fatalf("calls did not spread over both replicas: %v", seen)
	}

	a.Stop()
	// The first call to the dead replica fails and moves its connection to
	// TRANSIENT_FAILURE; from then on the pool skips it.
	deadline := time.Now().Add(10 * time.Second)
	for conns[0].GetState().String() != "TRANSIENT_FAILURE" && time.Now().Before(deadline) {
		_, _ = watchv1.NewWatchServiceClient(conns[0]).Get(ctx, &watchv1.GetRequest{})
		time.Sleep(20 * time.Millisecond)
	}
	for i := 0; i < 10; i++ {
		resp, err := p.Client().Get(ctx, &watchv1.GetRequest{})
		if err != nil {
			t.Fatalf("call %d after a replica went away: %v", i, err)
		}
		if resp.GetResourceVersion() != "b" {
			t.Fatalf("call %d reached %q, want the healthy replica b", i, resp.GetResourceVersion())
		}
	}
}

// TestPoolSkipsReplicaThatIsGoneOrNotSynced: a replica that went away
// (its connection still looks IDLE until a call tries it) or whose cache
// has not synced (it answers UNAVAILABLE) does not fail any call: each one
// moves on to the replica that serves, watches and streamed lists
// included, whose first message then arrives as the replica sent it.
func TestPoolSkipsReplicaThatIsGoneOrNotSynced(t *testing.T) {
	gone, addrGone := serve(t, "gone")
	_, addrSyncing := serveReplica(t, &replica{name: "syncing", unavailable: true})
	_, addrOK := serve(t, "ok")
	conns := dial(t, addrGone, addrSyncing, addrOK)
	p := New(conns)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Every connection is used once while every replica is up.
	for _, c := range conns {
		if _, err := watchv1.NewWatchServiceClient(c).Get(ctx, &watchv1.GetRequest{}); err != nil && status.Code(err) != codes.Unavailable {
			t.Fatal(err)
		}
	}
	gone.Stop()
	for i := 0; i < 9; i++ {
		resp, err := p.Client().Get(ctx, &watchv1.GetRequest{})
		if err != nil || resp.GetResourceVersion() != "ok" {
			t.Fatalf("get %d: %q, %v; want the replica that serves", i, resp.GetResourceVersion(), err)
		}
		l, err := p.Client().List(ctx, &watchv1.ListRequest{})
		if err != nil || l.GetResourceVersion() != "ok" {
			t.Fatalf("list %d: %q, %v; want the replica that serves", i, l.GetResourceVersion(), err)
		}
		w, err := p.Client().Watch(ctx, &watchv1.WatchRequest{})
		if err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
		for j, want := range []string{"", "ok"} {
			msg, err := w.Recv()
			if err != nil || string(msg.GetFrames()) != want {
				t.Fatalf("watch %d, message %d: %q, %v; want %q", i, j, msg.GetFrames(), err, want)
			}
		}
		if _, err := w.Recv(); err != io.EOF {
			t.Fatalf("watch %d: end %v", i, err)
		}
		sl, err := p.Client().StreamList(ctx, &watchv1.StreamListRequest{})
		if err != nil {
			t.Fatalf("stream list %d: %v", i, err)
		}
		var data []byte
		var rv string
		for {
			msg, err := sl.Recv()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("stream list %d: %v", i, err)
			}
			if rv == "" {
				rv = msg.GetResourceVersion()
			}
			data = append(data, msg.GetData()...)
		}
		if rv != "ok" || string(data) != "{ok}" {
			t.Fatalf("stream list %d: %q from %q; want {ok} from the replica that serves", i, data, rv)
		}
	}
}
