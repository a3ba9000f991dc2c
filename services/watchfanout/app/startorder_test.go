package app_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	storeapp "github.com/meridian-cp/meridian/services/store/app"
	"github.com/meridian-cp/meridian/services/watchfanout/app"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
)

// TestChangesOnlyWatchSeesWritesAfterItsFirstMessage: a watch of changes
// only from the store's current revision (RV unset, sendInitialEvents
// false) is established when its first message arrives, so a write the
// client makes after that is one of its events — even when reading the
// store's revision is slow (here 300 ms: the tier must read it before it
// answers, not after).
func TestChangesOnlyWatchSeesWritesAfterItsFirstMessage(t *testing.T) {
	var slow atomic.Bool
	delayRevRead := grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if r, ok := req.(*storev1.RangeRequest); ok && slow.Load() && string(r.GetKey()) == cache.Prefix && len(r.GetRangeEnd()) == 0 {
			time.Sleep(300 * time.Millisecond)
		}
		return h(ctx, req)
	})
	reg := prometheus.NewRegistry()
	st, err := storeapp.New(t.Context(), storeapp.Config{ID: "store-0", DataDir: t.TempDir(), Bootstrap: true, Logger: quietLogger(),
		ProgressInterval: 200 * time.Millisecond, Registerer: reg, GRPCServerOptions: []grpc.ServerOption{delayRevRead}})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	m := &storeMember{id: "store-0", addr: lis.Addr().String(), reg: reg, app: st, served: make(chan error, 1)}
	go func() { m.served <- st.Serve(lis) }()
	t.Cleanup(m.stop)
	e := startEnv(t, app.Config{}, []*storeMember{m})

	e.mustPut(configMap("ns", "before", nil, "x"))
	slow.Store(true)
	for _, mux := range []bool{false, true} {
		e.viaMux = mux
		s := e.mustWatch(&watchv1.WatchRequest{Resource: cmResource, Namespace: "ns", SendInitialEvents: ptr(false), ResourceVersionMatch: "NotOlderThan"})
		name := "after-first-message-" + map[bool]string{false: "watch", true: "watchmany"}[mux]
		rev := e.mustPut(configMap("ns", name, nil, "x"))
		if ev := s.expect(t, "ADDED", name); ev.rv() != rev {
			t.Fatalf("mux %v: ADDED at %d, want %d", mux, ev.rv(), rev)
		}
	}
	slow.Store(false)
}
