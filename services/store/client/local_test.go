package client

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// member answers as one store member: MemberList names leader as the
// leader; it counts the Ranges (by kind) and watches it serves.
type member struct {
	storev1.UnimplementedKVServiceServer
	storev1.UnimplementedClusterServiceServer
	storev1.UnimplementedWatchServiceServer
	leader                          string
	serializable, linearized, watch atomic.Int32
}

func (m *member) Range(_ context.Context, r *storev1.RangeRequest) (*storev1.RangeResponse, error) {
	if r.GetSerializable() {
		m.serializable.Add(1)
	} else {
		m.linearized.Add(1)
	}
	return &storev1.RangeResponse{}, nil
}

func (m *member) MemberList(context.Context, *storev1.MemberListRequest) (*storev1.MemberListResponse, error) {
	return &storev1.MemberListResponse{Members: []*storev1.Member{{Id: "leader", ClientAddress: m.leader, Leader: true}}}, nil
}

func (m *member) Watch(s grpc.BidiStreamingServer[storev1.WatchRequest, storev1.WatchResponse]) error {
	m.watch.Add(1)
	_, err := s.Recv()
	return err
}

// TestLocalMembersServeReadsAndWatches: with Options.Local, serializable
// reads and watches go to the local members only, round-robin, while
// linearizable reads go to the leader; without it, watches go to the
// leader and serializable reads to every member.
func TestLocalMembersServeReadsAndWatches(t *testing.T) {
	var members []*member
	var addrs []string
	for range 4 {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, lis.Addr().String())
		m := &member{}
		srv := grpc.NewServer()
		storev1.RegisterKVServiceServer(srv, m)
		storev1.RegisterClusterServiceServer(srv, m)
		storev1.RegisterWatchServiceServer(srv, m)
		go srv.Serve(lis)
		t.Cleanup(srv.Stop)
		members = append(members, m)
	}
	for _, m := range members {
		m.leader = addrs[0]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	run := func(t *testing.T, opts Options, endpoints []string) {
		t.Helper()
		for _, m := range members {
			m.serializable.Store(0)
			m.linearized.Store(0)
			m.watch.Store(0)
		}
		c, err := Dial(endpoints, nil, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// The first refresh has found the leader once a linearizable
		// read reaches it.
		for members[0].linearized.Load() == 0 {
			if _, err := c.KV().Range(ctx, &storev1.RangeRequest{Key: []byte("k")}); err != nil {
				t.Fatal(err)
			}
		}
		for range 8 {
			if _, err := c.KV().Range(ctx, &storev1.RangeRequest{Key: []byte("k"), Serializable: true}); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 {
			s, err := c.WatchService().Watch(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Send(&storev1.WatchRequest{}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Recv(); err == nil {
				t.Fatal("the watch stream did not end")
			}
		}
	}
	count := func(f func(m *member) int32) []int32 {
		var out []int32
		for _, m := range members {
			out = append(out, f(m))
		}
		return out
	}
	serial := func(m *member) int32 { return m.serializable.Load() }
	watches := func(m *member) int32 { return m.watch.Load() }
	linear := func(m *member) int32 { return m.linearized.Load() }

	t.Run("local", func(t *testing.T) {
		// Member 3 is given only as local: it is added to the endpoints.
		run(t, Options{Local: []string{addrs[2], addrs[3]}}, addrs[:3])
		if got := count(serial); got[0] != 0 || got[1] != 0 || got[2] != 4 || got[3] != 4 {
			t.Errorf("serializable reads per member %v, want [0 0 4 4]", got)
		}
		if got := count(watches); got[0] != 0 || got[1] != 0 || got[2] != 1 || got[3] != 1 {
			t.Errorf("watches per member %v, want [0 0 1 1]", got)
		}
		if got := count(linear); got[1]+got[2]+got[3] != 0 {
			t.Errorf("linearizable reads per member %v, want all at the leader", got)
		}
	})
	t.Run("none", func(t *testing.T) {
		run(t, Options{}, addrs)
		if got := count(serial); got[0] != 2 || got[1] != 2 || got[2] != 2 || got[3] != 2 {
			t.Errorf("serializable reads per member %v, want [2 2 2 2]", got)
		}
		if got := count(watches); got[0] != 2 {
			t.Errorf("watches per member %v, want both at the leader", got)
		}
	})
}
