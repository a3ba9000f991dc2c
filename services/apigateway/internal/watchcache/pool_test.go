package watchcache

import (
	"context"
	"net"
	"testing"
	"time"

	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// replica is a watch-tier stand-in that answers Get with its own name, so
// the test can see which replica a call reached.
type replica struct {
	watchv1.UnimplementedWatchServiceServer
	name string
}

func (r *replica) Get(context.Context, *watchv1.GetRequest) (*watchv1.GetResponse, error) {
	return &watchv1.GetResponse{ResourceVersion: r.name}, nil
}

func serve(t *testing.T, name string) (*grpc.Server, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	watchv1.RegisterWatchServiceServer(srv, &replica{name: name})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return srv, lis.Addr().String()
}

// TestPoolMovesToHealthyReplica: calls spread over the replicas; when one
// goes away, every later call reaches the one that is left.
func TestPoolMovesToHealthyReplica(t *testing.T) {
	a, addrA := serve(t, "a")
	_, addrB := serve(t, "b")
	var conns []*grpc.ClientConn
	for _, addr := range []string{addrA, addrB} {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
	}
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
