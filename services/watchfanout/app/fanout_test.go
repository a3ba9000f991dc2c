package app_test

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/meridian-cp/meridian/lib/grpcclient"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/app"
)

// TestSlowWatcherIsCutOffFastWatchersKeepUp: a watcher that does not read
// is terminated when its buffer overflows (ERROR 429, counted), while 100
// watchers that read receive every event.
func TestSlowWatcherIsCutOffFastWatchersKeepUp(t *testing.T) {
	e := newEnv(t, app.Config{WatcherBuffer: 500})
	ctx := t.Context()
	start := e.mustPut(configMap("ns", "seed", nil, ""))
	rv := strconv.FormatInt(start, 10)

	// The slow watcher's connection has small fixed flow-control windows,
	// so the server cannot park many events in transport buffers.
	slowConn, err := grpcclient.Dial(e.addr, nil, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer slowConn.Close()
	slow, err := watchv1.NewWatchServiceClient(slowConn).Watch(ctx, &watchv1.WatchRequest{Resource: cmResource, ResourceVersion: rv})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := slow.Recv(); err != nil {
		t.Fatal(err)
	}

	const fast, events = 100, 1000
	var got [fast]atomic.Int64
	var wg sync.WaitGroup
	for i := range fast {
		// Fast readers: count frames without decoding them.
		cl, err := e.watch.Watch(ctx, &watchv1.WatchRequest{Resource: cmResource, ResourceVersion: rv})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				resp, err := cl.Recv()
				if err != nil {
					return
				}
				if bytes.Contains(resp.GetFrames(), []byte(`"type":"ERROR"`)) {
					t.Errorf("fast watcher %d: %s", i, resp.GetFrames())
					return
				}
				if got[i].Add(int64(bytes.Count(resp.GetFrames(), []byte("\n")))) == events {
					return
				}
			}
		}()
	}
	payload := strings.Repeat("x", 4<<10)
	began := time.Now()
	var wwg sync.WaitGroup
	for w := range 5 {
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			for i := range events / 5 {
				if _, err := e.put(ctx, configMap("ns", fmt.Sprintf("cm-%d-%d", w, i%10), nil, payload+strconv.Itoa(i))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wwg.Wait()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		for i := range fast {
			if n := got[i].Load(); n != events {
				t.Fatalf("fast watcher %d got %d/%d", i, n, events)
			}
		}
	case <-time.After(60 * time.Second):
		for i := range fast {
			if n := got[i].Load(); n != events {
				t.Errorf("fast watcher %d got %d/%d", i, n, events)
			}
		}
		t.FailNow()
	}
	t.Logf("%d events to %d fast watchers in %v", events, fast, time.Since(began))
	if n := mustCounter(t, e, "too_slow"); n != 1 {
		t.Fatalf("too_slow terminations = %v, want 1", n)
	}
	// The slow watcher, once it reads, finds an ERROR 429 and the end.
	var last event
	for {
		resp, err := slow.Recv()
		if err != nil {
			break
		}
		if evs := parseFrames(t, resp.GetFrames()); len(evs) > 0 {
			last = evs[len(evs)-1]
		}
	}
	if last.Type != "ERROR" || last.Object.Code != 429 {
		t.Fatalf("slow watcher's last event %+v, want ERROR 429", last)
	}
}

func mustCounter(t *testing.T, e *env, reason string) float64 {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "watchfanout_terminated_watchers_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason && hasLabel(m.GetLabel(), "resource", "configmaps") {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func hasLabel[L interface {
	GetName() string
	GetValue() string
}](ls []L, name, value string) bool {
	for _, l := range ls {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}
