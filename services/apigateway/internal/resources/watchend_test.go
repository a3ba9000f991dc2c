package resources

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
)

// TestWatchEndsQuietlyOnceItsContextEnded: a watch the store serves whose
// context has ended (its timeoutSeconds passed, or its client went) ends
// without an ERROR event, whatever the store call it was in returned:
// the end is the watch's own, as kube-apiserver ends a watch at its
// timeout, not a failure of the store. Each case ends the context before
// the watch reaches the store, so the store's read fails with the ended
// context's gRPC code.
func TestWatchEndsQuietlyOnceItsContextEnded(t *testing.T) {
	e := newEnv(t, Config{ResourceVersionWait: time.Minute})
	e.namespace("ns")
	e.mustCreate(configMap("ns", ""), `{"metadata":{"name":"a"}}`)
	yes := true
	for _, tc := range []struct {
		name string
		req  func() *apiv1.WatchRequest
		// end ends the watch's context the way its client or its deadline
		// does.
		end func(context.Context) context.Context
	}{
		{"initial events, deadline passed", func() *apiv1.WatchRequest {
			return &apiv1.WatchRequest{SendInitialEvents: &yes, AllowWatchBookmarks: true, ResourceVersionMatch: "NotOlderThan", ResourceVersion: strconv.FormatInt(e.revision(), 10)}
		}, expired},
		{"initial events, client gone", func() *apiv1.WatchRequest {
			return &apiv1.WatchRequest{SendInitialEvents: &yes, AllowWatchBookmarks: true, ResourceVersionMatch: "NotOlderThan", ResourceVersion: strconv.FormatInt(e.revision(), 10)}
		}, canceled},
		{"legacy list, deadline passed", func() *apiv1.WatchRequest { return &apiv1.WatchRequest{} }, expired},
		{"changes, deadline passed", func() *apiv1.WatchRequest {
			return &apiv1.WatchRequest{ResourceVersion: strconv.FormatInt(e.revision(), 10)}
		}, expired},
		// The deadline passed below a context.WithCancel: the derived
		// context ends Canceled, with the deadline as its cause, as under
		// the gateway's HTTP/2 streams (reqdeadline).
		{"changes, deadline passed above a derived context", func() *apiv1.WatchRequest {
			return &apiv1.WatchRequest{ResourceVersion: strconv.FormatInt(e.revision(), 10)}
		}, func(ctx context.Context) context.Context {
			child, cancel := context.WithCancel(expired(ctx))
			t.Cleanup(cancel)
			return child
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := tc.req()
			req.Ref, req.Accept = configMap("ns", ""), acceptJSON
			stream := newSignalStream(tc.end(t.Context()))
			if err := e.s.Watch(req, stream); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Watch returned %v, want a quiet end", err)
			}
			if data, _ := stream.state(); data != "" {
				t.Errorf("the watch sent %q, want nothing after its context ended", data)
			}
		})
	}
}

// expired is ctx with a deadline that has passed.
func expired(ctx context.Context) context.Context {
	ctx, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	cancel() // ended already; cancel keeps its DeadlineExceeded
	return ctx
}

// canceled is ctx ended as by its client going away.
func canceled(ctx context.Context) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	return ctx
}
