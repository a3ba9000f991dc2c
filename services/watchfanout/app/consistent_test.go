package app_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/watchmux"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/app"
)

// TestConsistentWatchesAtOnce: many consistent watches (RV unset) opened
// at once, over WatchMany and Watch, wait for the store's revision without
// a goroutine each (the cache calls back once its shared read is done)
// and every one gets every object, then its end bookmark; a write that
// lands while they start is in their initial events or follows them,
// never both and never lost.
func TestConsistentWatchesAtOnce(t *testing.T) {
	e := newEnv(t, app.Config{InitialEventsConcurrency: 4})
	const objects = 50
	for i := range objects {
		e.mustPut(configMap("ns", fmt.Sprintf("cm-%02d", i), nil, "x"))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	m := watchmux.New(e.watch, watchmux.Options{})
	const watches = 200
	var wg sync.WaitGroup
	errs := make(chan error, watches+1)
	for i := range watches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &watchv1.WatchRequest{Resource: cmResource, Namespace: "ns", SendInitialEvents: ptr(true), ResourceVersionMatch: "NotOlderThan", AllowBookmarks: true}
			var ws interface {
				Recv() (*watchv1.WatchResponse, error)
			}
			var err error
			if i%10 == 0 {
				ws, err = e.watch.Watch(ctx, req)
			} else {
				ws, err = m.Watch(ctx, req)
			}
			if err != nil {
				errs <- err
				return
			}
			seen := map[string]bool{}
			for {
				resp, err := ws.Recv()
				if err != nil {
					errs <- fmt.Errorf("watch %d after %d objects: %w", i, len(seen), err)
					return
				}
				for _, ev := range parseFrames(t, resp.GetFrames()) {
					switch ev.Type {
					case "ADDED", "MODIFIED":
						seen[ev.Object.Metadata.Name] = true
					case "BOOKMARK":
						if ev.Object.Metadata.Annotations["k8s.io/initial-events-end"] != "true" {
							continue
						}
						if len(seen) < objects {
							errs <- fmt.Errorf("watch %d: end bookmark after %d of %d objects", i, len(seen), objects)
						}
						return
					default:
						errs <- fmt.Errorf("watch %d: %s event", i, ev.Type)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestConsistentWatchWithoutStore: a consistent watch whose store read
// does not come back ends with an ERROR frame well before the read's own
// bound (10 s): 504 once the read wait timeout has passed (the wait's
// timer), or 503 if the read fails first.
func TestConsistentWatchWithoutStore(t *testing.T) {
	e := newEnv(t, app.Config{ReadWaitTimeout: 500 * time.Millisecond})
	e.mustPut(configMap("ns", "cm", nil, "x"))
	for _, m := range e.stores {
		m.stop()
	}
	began := time.Now()
	s, err := e.openWatch(t.Context(), &watchv1.WatchRequest{Resource: cmResource, Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.cancel()
	ev := s.next(t)
	if ev.Type != "ERROR" || (ev.Object.Code != 504 && ev.Object.Code != 503) {
		t.Fatalf("got %s %d %s, want an ERROR frame 504 or 503", ev.Type, ev.Object.Code, ev.Object.Reason)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("the ERROR frame took %v", took)
	}
	if _, ok := <-s.events; ok || s.err != nil {
		t.Fatalf("stream did not end after the ERROR frame: %v", s.err)
	}
}
