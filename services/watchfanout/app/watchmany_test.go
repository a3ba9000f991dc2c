package app_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/watchmux"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/app"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestWatchSemanticsOverWatchMany runs the watch semantics tests with
// every watch multiplexed over WatchMany: same events, same order, same
// errors as Watch.
func TestWatchSemanticsOverWatchMany(t *testing.T) {
	for name, run := range map[string]func(*testing.T, *env){
		"initial events, bookmark, changes": initialEventsThenBookmarkThenChanges,
		"selector transitions":              selectorTransitions,
		"replay stays in its namespace":     replayStaysInItsNamespace,
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, app.Config{})
			e.viaMux = true
			run(t, e)
		})
	}
	t.Run("410 and pre-stream errors", func(t *testing.T) {
		e := newEnv(t, app.Config{HistoryMaxEvents: 10})
		e.viaMux = true
		first := e.mustPut(configMap("ns", "cm", nil, "0"))
		for i := range 20 {
			e.mustPut(configMap("ns", "cm", nil, strconv.Itoa(i)))
		}
		// The cache follows the store: a consistent list returns once it
		// holds every write above, so that first is out of its history.
		// Before that, a watch from first is served from the history it
		// still has, as kube-apiserver's watch cache does.
		if _, err := e.watch.List(t.Context(), &watchv1.ListRequest{Resource: cmResource, Namespace: "ns"}); err != nil {
			t.Fatal(err)
		}
		s := e.mustWatch(&watchv1.WatchRequest{Resource: cmResource, ResourceVersion: strconv.FormatInt(first, 10)})
		if ev := s.expect(t, "ERROR", ""); ev.Object.Code != 410 || ev.Object.Reason != "Expired" {
			t.Fatalf("error %+v, want 410 Expired", ev.Object)
		}
		if _, ok := <-s.events; ok || s.err != nil {
			t.Fatalf("stream continued after ERROR, or ended with %v", s.err)
		}
		_, err := e.openWatch(t.Context(), &watchv1.WatchRequest{Resource: cmResource, LabelSelector: "a in (", ResourceVersion: "0"})
		if st := apiStatus(t, err); st.GetCode() != 400 || st.GetReason() != "BadRequest" {
			t.Fatalf("bad selector: %v", err)
		}
		_, err = e.openWatch(t.Context(), &watchv1.WatchRequest{Resource: &watchv1.Resource{Version: "v1", Resource: "nope"}})
		if st := apiStatus(t, err); st.GetCode() != 404 {
			t.Fatalf("unknown resource: %v", err)
		}
	})
}

// TestWatchManySharesOneStream: a hundred watches over one stream each get
// their own events; a cancelled one ends alone; a reader that stops
// reading holds up only its own watch (credit), which watchfanout cuts off
// with a 429 ERROR frame once its events pile up, while the stream's other
// watches get every event.
func TestWatchManySharesOneStream(t *testing.T) {
	e := newEnv(t, app.Config{WatcherBuffer: 100})
	ctx := t.Context()
	m := watchmux.New(e.watch, watchmux.Options{Buffer: 64})
	const n = 100
	type watch struct {
		cancel context.CancelFunc
		ws     interface {
			Recv() (*watchv1.WatchResponse, error)
		}
	}
	watches := make([]watch, n)
	for i := range n {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ns := fmt.Sprintf("ns-%d", i%10)
		if i == 1 {
			ns = "" // the slow reader watches everything
		}
		ws, err := m.Watch(wctx, &watchv1.WatchRequest{Resource: cmResource, Namespace: ns, ResourceVersion: "0"})
		if err != nil {
			t.Fatal(err)
		}
		if first, err := ws.Recv(); err != nil || len(first.GetFrames()) != 0 {
			t.Fatalf("watch %d first message %v, %v", i, first, err)
		}
		watches[i] = watch{cancel, ws}
	}
	// Watch 0 is cancelled; watch 1's reader stops reading.
	watches[0].cancel()
	if _, err := watches[0].ws.Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled watch: %v", err)
	}
	const perNS = 30
	for j := range perNS {
		for ns := range 10 {
			e.mustPut(configMap(fmt.Sprintf("ns-%d", ns), fmt.Sprintf("cm-%d", j), nil, "x"))
		}
	}
	for i := 2; i < n; i++ {
		got := 0
		deadline := time.Now().Add(20 * time.Second)
		for got < perNS {
			if time.Now().After(deadline) {
				t.Fatalf("watch %d: %d of %d events", i, got, perNS)
			}
			resp, err := watches[i].ws.Recv()
			if err != nil {
				t.Fatalf("watch %d after %d events: %v", i, got, err)
			}
			for _, ev := range parseFrames(t, resp.GetFrames()) {
				if ev.Type != "ADDED" || ev.Object.Metadata.Name != fmt.Sprintf("cm-%d", got) || ev.Object.Metadata.Namespace != fmt.Sprintf("ns-%d", i%10) {
					t.Fatalf("watch %d event %d: %s %s/%s", i, got, ev.Type, ev.Object.Metadata.Namespace, ev.Object.Metadata.Name)
				}
				got++
			}
		}
	}
	// The slow reader (300 events so far, a 64-message window, 100 events
	// of buffer in watchfanout): more events, then what the window let
	// through, then the 429 ERROR frame and the end.
	for j := range 500 {
		e.mustPut(configMap("flood", fmt.Sprintf("cm-%d", j), nil, "x"))
	}
	var last event
	var err error
	for {
		var resp *watchv1.WatchResponse
		if resp, err = watches[1].ws.Recv(); err != nil {
			break
		}
		if evs := parseFrames(t, resp.GetFrames()); len(evs) > 0 {
			last = evs[len(evs)-1]
		}
	}
	if !errors.Is(err, io.EOF) || last.Type != "ERROR" || last.Object.Code != 429 {
		t.Fatalf("slow reader ended with %v after %s %d, want a 429 ERROR frame and EOF", err, last.Type, last.Object.Code)
	}
	// The stream is still good for new watches.
	ws, err := m.Watch(ctx, &watchv1.WatchRequest{Resource: cmResource, Namespace: "ns-3", ResourceVersion: "0", TimeoutSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	added := 0
	for {
		resp, err := ws.Recv()
		if errors.Is(err, io.EOF) {
			break // the 1 s timeout ends it normally
		}
		if err != nil {
			t.Fatal(err)
		}
		added += len(parseFrames(t, resp.GetFrames()))
	}
	if added != perNS {
		t.Fatalf("new watch got %d initial events, want %d", added, perNS)
	}
}
