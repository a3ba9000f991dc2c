package server

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/batchcodec"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
)

// TestWatchManyDemux: the watches of one stream get their own events,
// each message carrying its watch's id; a cancelled watch ends alone;
// credit and cancels for ids that are not open change nothing.
func TestWatchManyDemux(t *testing.T) {
	e := newTestEnv(t, cache.Options{}, Config{})
	m := e.watchMany()
	changesOnly := func() *watchv1.WatchRequest {
		return &watchv1.WatchRequest{ResourceVersionMatch: notOlderThan, SendInitialEvents: new(bool)}
	}
	m.open(1, 0, "a", changesOnly())
	m.open(2, 0, "b", changesOnly())
	m.first(1)
	m.first(2)
	e.put("a", "x", nil)
	e.put("b", "y", nil)
	if got := m.framesOf(1, 1); !slices.Equal(got, []string{"ADDED a/x"}) {
		t.Fatalf("watch 1: %v", got)
	}
	if got := m.framesOf(2, 1); !slices.Equal(got, []string{"ADDED b/y"}) {
		t.Fatalf("watch 2: %v", got)
	}
	m.credit(99, 5)
	m.cancelWatch(98)
	m.cancelWatch(1)
	if got, st := m.untilEnd(1); len(got) != 0 || st != nil {
		t.Fatalf("the cancelled watch ended with %v and status %v", got, st)
	}
	e.put("a", "z", nil)
	e.put("b", "w", nil)
	if got := m.framesOf(2, 1); !slices.Equal(got, []string{"ADDED b/w"}) {
		t.Fatalf("watch 2 after the cancel: %v", got)
	}
	e.registered(2) // the only watch left
}

// TestWatchManyProtocolErrors: a request that breaks the protocol ends
// the stream with InvalidArgument, after ending its open watches.
func TestWatchManyProtocolErrors(t *testing.T) {
	e := newTestEnv(t, cache.Options{}, Config{})
	for _, tc := range []struct {
		name string
		send func(*manyStream)
	}{
		{"an id in use", func(m *manyStream) { m.open(1, 0, "p", &watchv1.WatchRequest{ResourceVersion: "0"}) }},
		{"no op", func(m *manyStream) { m.send(&watchv1.WatchManyRequest{}) }},
	} {
		m := e.watchMany()
		m.open(1, 0, "p", &watchv1.WatchRequest{ResourceVersion: "0"})
		m.first(1)
		tc.send(m)
		if _, st := m.untilEnd(1); st != nil {
			t.Fatalf("%s: the open watch ended with status %v", tc.name, st)
		}
		if err := m.ended(); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%s: the stream ended with %v, want InvalidArgument", tc.name, err)
		}
	}
}

// TestWatchManyEndsWhenStopping: once the service is stopping, a
// WatchMany stream ends each of its watches quietly, then itself with OK.
func TestWatchManyEndsWhenStopping(t *testing.T) {
	stopping := make(chan struct{})
	e := newTestEnv(t, cache.Options{}, Config{Stopping: stopping})
	m := e.watchMany()
	m.open(1, 0, "s", &watchv1.WatchRequest{ResourceVersion: "0"})
	m.open(2, 0, "s", &watchv1.WatchRequest{ResourceVersion: "0"})
	m.first(1)
	m.first(2)
	close(stopping)
	for id := range int64(2) {
		if got, st := m.untilEnd(id + 1); len(got) != 0 || st != nil {
			t.Fatalf("watch %d ended with %v and status %v", id+1, got, st)
		}
	}
	if err := m.ended(); err != nil {
		t.Fatalf("the stream ended with %v", err)
	}
}

// TestMuxBookkeeping: an id in use is refused; once the stream is ending
// (stopAll) nothing more is opened; after closeSends nothing is sent.
func TestMuxBookkeeping(t *testing.T) {
	e := newTestEnv(t, cache.Options{}, Config{})
	var mu sync.Mutex
	ends := map[int64]int{}
	emit := func(id int64, _ *watchv1.WatchResponse, end bool, _ error) error {
		mu.Lock()
		defer mu.Unlock()
		if end {
			ends[id]++
		}
		return nil
	}
	sendMsg := func(any) error { return nil }
	m := newMux(e.srv, t.Context(), true, emit, sendMsg)
	quit, served := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(served)
		m.serve(quit)
	}()
	req := &watchv1.WatchRequest{Resource: configMaps, ResourceVersion: "0"}
	if w, ok := m.open(1, req, 0, false, nil); w == nil || !ok {
		t.Fatal("the first open failed")
	}
	if w, ok := m.open(1, req, 0, false, nil); w != nil || ok {
		t.Fatal("an id in use was opened again")
	}
	m.stopAll()
	if w, ok := m.open(2, req, 0, false, nil); w != nil || !ok {
		t.Fatal("a watch was opened on an ending stream")
	}
	m.live.Wait()
	close(quit)
	<-served
	m.closeSends()
	mu.Lock()
	if ends[1] != 1 || len(ends) != 1 {
		t.Errorf("end messages %v, want one, of watch 1", ends)
	}
	mu.Unlock()
	if err := m.send(1, &watchv1.WatchResponse{}, false, nil); !errors.Is(err, errSendClosed) {
		t.Fatalf("send after closeSends: %v", err)
	}
	if err := m.sendEncoded(&batchcodec.Message{}); !errors.Is(err, errSendClosed) {
		t.Fatalf("sendEncoded after closeSends: %v", err)
	}
}

// TestSetupGoesLiveWhileTheSenderDrains: many watches of one stream
// finish their setup (the setup goroutine gives up the watch in idle)
// while writes keep poking them, so the stream's sender drains a watch
// right as its setup lets it go. Under -race this is the interleaving of
// idle and drain; each watch must see its object's changes in order,
// without an error, up to the last write.
func TestSetupGoesLiveWhileTheSenderDrains(t *testing.T) {
	const watches, maxWrites = 60, 400
	e := newTestEnv(t, cache.Options{}, Config{})
	e.put("busy", "cm", nil)
	val, err := e.codec.EncodeStorage(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "busy", Name: "cm"}})
	if err != nil {
		t.Fatal(err)
	}
	put := &storev1.TxnRequest{Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestPut{
		RequestPut: &storev1.PutRequest{Key: []byte(e.cms.Key("busy", "cm")), Value: val}}}}}
	stop, wrote := make(chan struct{}), make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
		defer cancel()
		for range maxWrites {
			select {
			case <-stop:
				wrote <- nil
				return
			default:
			}
			if _, err := e.kv.Txn(ctx, put); err != nil {
				wrote <- err
				return
			}
		}
		wrote <- nil
	}()
	m := e.watchMany()
	for id := range int64(watches) {
		m.open(id, 0, "busy", &watchv1.WatchRequest{ResourceVersion: "0"})
	}
	for id := range int64(watches) {
		m.first(id)
	}
	close(stop)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	last := e.put("busy", "last", nil)
	for id := range int64(watches) {
		var prev int64
		for done := false; !done; {
			resp := m.nextOf(id)
			if resp.GetEnd() {
				t.Fatalf("watch %d ended (status %x) after revision %d", id, resp.GetStatus(), prev)
			}
			for _, f := range frames(t, resp.GetResponse().GetFrames()) {
				if f.rv <= prev || !strings.HasSuffix(f.desc, " busy/cm") && f.desc != "ADDED busy/last" {
					t.Fatalf("watch %d: %s at %d after revision %d", id, f.desc, f.rv, prev)
				}
				prev, done = f.rv, f.rv == last
			}
		}
	}
}
