package app_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/app"
)

// progressCounter counts the progress requests the store receives on its
// watch streams.
type progressCounter struct{ n atomic.Int64 }

func (c *progressCounter) intercept(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if info.FullMethod != storev1.WatchService_Watch_FullMethodName {
		return handler(srv, ss)
	}
	return handler(srv, &countingStream{ServerStream: ss, c: c})
}

type countingStream struct {
	grpc.ServerStream
	c *progressCounter
}

func (s *countingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if req, ok := m.(*storev1.WatchRequest); ok && err == nil && req.GetProgressRequest() != nil {
		s.c.n.Add(1)
	}
	return err
}

// TestLoneWritesNeedNoProgressRound: the store marks a response that holds
// the last of its revision's events, so after lone writes (one event per
// revision) the cache knows each write's revision is complete from the
// event itself: it asks the store for no progress notification, and a
// consistent read of each write's object right after its event is served
// at once from the cache, without that round trip.
func TestLoneWritesNeedNoProgressRound(t *testing.T) {
	var progress progressCounter
	e := newEnv(t, app.Config{}, grpc.ChainStreamInterceptor(progress.intercept))
	e.mustPut(configMap("ns", "first", nil, "x"))
	w := e.mustWatch(&watchv1.WatchRequest{Resource: cmResource, Namespace: "ns"})
	w.expect(t, "ADDED", "first") // a watch without a resourceVersion starts with the state
	// A consistent read waits for the cache to reach the store's revision
	// (asking for progress if it has not); after it the cache is there.
	if _, err := e.watch.Get(t.Context(), &watchv1.GetRequest{Resource: cmResource, Namespace: "ns", Name: "first"}); err != nil {
		t.Fatal(err)
	}
	before := progress.n.Load()
	const writes = 5
	for i := range writes {
		name := fmt.Sprintf("cm-%d", i)
		e.mustPut(configMap("ns", name, nil, "x"))
		w.expect(t, "ADDED", name)
		if _, err := e.watch.Get(t.Context(), &watchv1.GetRequest{Resource: cmResource, Namespace: "ns", Name: name}); err != nil {
			t.Fatalf("consistent get of %s after its event: %v", name, err)
		}
	}
	if n := progress.n.Load() - before; n != 0 {
		t.Errorf("the store received %d progress requests over %d lone writes and consistent reads, want 0", n, writes)
	}
}
