package app_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/app"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
)

// TestChangesOnlyWatchSeesWritesAfterItsFirstMessage: a watch of changes
// only from the store's current revision (RV unset, sendInitialEvents
// false) is established when its first message arrives, so a write the
// client makes after that is one of its events — even when reading the
// store's revision is slow (here 300 ms: watchfanout must read it before
// it answers, not after).
func TestChangesOnlyWatchSeesWritesAfterItsFirstMessage(t *testing.T) {
	var slow atomic.Bool
	delayRevRead := grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if r, ok := req.(*storev1.RangeRequest); ok && slow.Load() && string(r.GetKey()) == cache.Prefix && len(r.GetRangeEnd()) == 0 {
			time.Sleep(300 * time.Millisecond)
		}
		return h(ctx, req)
	})
	e := newEnv(t, app.Config{}, delayRevRead)
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
