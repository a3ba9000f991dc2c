package app_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/meridian-cp/meridian/lib/watchmux"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/app"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/batchcodec/batchcodectest"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
)

// TestInitialEventsBufferLifetime is a relist storm in small with
// watchfanout's batches encoded into buffers of a pool that poisons and
// reuses each buffer the moment gRPC gives it back (package batchcodec
// hands them to gRPC, whose Send returns before they are written): every
// watch, over Watch and over WatchMany, gets every object intact and in
// order, then the initial-events-end bookmark; and every buffer comes back.
func TestInitialEventsBufferLifetime(t *testing.T) {
	pool := batchcodectest.New(t)
	e := newEnv(t, app.Config{BufferPool: pool, InitialEventsConcurrency: 4})
	const objects = 200
	data := strings.Repeat("d", 1000) // batches of 16 KiB and more: encoded in place
	for i := range objects {
		e.mustPut(configMap("storm", fmt.Sprintf("cm-%03d", i), nil, data))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	m := watchmux.New(e.watch, watchmux.Options{})
	var wg sync.WaitGroup
	for i := range 12 {
		req := &watchv1.WatchRequest{Resource: cmResource, Namespace: "storm", SendInitialEvents: ptr(true),
			ResourceVersionMatch: "NotOlderThan", AllowBookmarks: true}
		var ws grpc.ServerStreamingClient[watchv1.WatchResponse]
		var err error
		if i%2 == 0 {
			ws, err = m.Watch(ctx, req)
		} else {
			ws, err = e.watch.Watch(ctx, req)
		}
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if first, err := ws.Recv(); err != nil || len(first.GetFrames()) != 0 {
				t.Errorf("watch %d: first message %v, %v", i, first, err)
				return
			}
			got := 0
			for {
				resp, err := ws.Recv()
				if err != nil {
					t.Errorf("watch %d after %d objects: %v", i, got, err)
					return
				}
				for _, ev := range parseFrames(t, resp.GetFrames()) {
					if ev.Type == "BOOKMARK" {
						if got != objects || ev.Object.Metadata.Annotations[cache.InitialEventsEndAnnotation] != "true" {
							t.Errorf("watch %d: bookmark %v after %d objects", i, ev.Object.Metadata.Annotations, got)
						}
						return
					}
					if ev.Type != "ADDED" || ev.Object.Metadata.Name != fmt.Sprintf("cm-%03d", got) || ev.Object.Data["d"] != data {
						t.Errorf("watch %d object %d: %s %s, %d bytes of data", i, got, ev.Type, ev.Object.Metadata.Name, len(ev.Object.Data["d"]))
						return
					}
					got++
				}
			}
		}()
	}
	wg.Wait()
	cancel()
	e.stopFanout()
	if n := pool.AwaitReturned(5 * time.Second); n != 0 {
		t.Fatalf("%d buffers never given back", n)
	}
	if pool.Gets() == 0 {
		t.Fatal("the pool was not used")
	}
}
