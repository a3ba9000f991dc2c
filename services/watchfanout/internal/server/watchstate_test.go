package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
)

var notOlderThan = string(metav1.ResourceVersionMatchNotOlderThan)

// watchOne opens a Watch of ConfigMaps in ns and reads its first message,
// which must be empty: the watch is established.
func (e *testEnv) watchOne(ns string, req *watchv1.WatchRequest) grpc.ServerStreamingClient[watchv1.WatchResponse] {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), waitLimit)
	e.t.Cleanup(cancel)
	req.Resource, req.Namespace = configMaps, ns
	st, err := e.client.Watch(ctx, req)
	if err != nil {
		e.t.Fatal(err)
	}
	first, err := st.Recv()
	if err != nil {
		e.t.Fatal(err)
	}
	if len(first.GetFrames()) != 0 {
		e.t.Fatalf("the first message holds frames: %q", first.GetFrames())
	}
	return st
}

// recvFrames reads messages of st until they have held n frames.
func recvFrames(t *testing.T, st grpc.ServerStreamingClient[watchv1.WatchResponse], n int) []frame {
	t.Helper()
	var out []frame
	for len(out) < n {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("after %v: %v", descs(out), err)
		}
		out = append(out, frames(t, resp.GetFrames())...)
	}
	return out
}

// TestWatchStart: where a watch starts by its resourceVersion,
// resourceVersionMatch and sendInitialEvents — state (ADDED in key
// order), the initial-events-end bookmark, history replayed after N, or
// nothing — and that it is live afterwards. Each case has a namespace of
// its own with cm0 written at r1 and cm1 at r2, and a write to another
// namespace between them that no case sees.
func TestWatchStart(t *testing.T) {
	e := newTestEnv(t, cache.Options{}, Config{})
	sie := func(b bool) *bool { return &b }
	state := []string{"ADDED NS/cm0", "ADDED NS/cm1"}
	for i, tc := range []struct {
		name      string
		rv        func(r1, r2 int64) string
		match     string
		initial   *bool
		bookmarks bool
		want      []string // NS stands for the case's namespace
	}{
		{name: "unset: consistent state", want: state},
		{name: "0: the cache's state", rv: rvConst("0"), want: state},
		{name: "0 with bookmarks: no end bookmark unasked", rv: rvConst("0"), bookmarks: true, want: state},
		{name: "N: the changes after N", rv: rvOf(1), want: []string{"ADDED NS/cm1"}},
		{name: "N at the last change: nothing before live changes", rv: rvOf(2)},
		{name: "sendInitialEvents, unset: state and the end bookmark", match: notOlderThan, initial: sie(true), bookmarks: true,
			want: append(slices.Clone(state), "BOOKMARK end")},
		{name: "sendInitialEvents, N: state not older than N and the end bookmark", rv: rvOf(1), match: notOlderThan, initial: sie(true), bookmarks: true,
			want: append(slices.Clone(state), "BOOKMARK end")},
		{name: "sendInitialEvents=false, unset: changes after a consistent revision", match: notOlderThan, initial: sie(false)},
		{name: "sendInitialEvents=false, N: the changes after N", rv: rvOf(1), match: notOlderThan, initial: sie(false),
			want: []string{"ADDED NS/cm1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func(parent *testing.T) { e.t = parent }(e.t)
			e.t = t // the env's helpers report to the case
			ns := fmt.Sprintf("start-%d", i)
			r1 := e.put(ns, "cm0", nil)
			e.put("elsewhere", ns, nil)
			r2 := e.put(ns, "cm1", nil)
			req := &watchv1.WatchRequest{ResourceVersionMatch: tc.match, SendInitialEvents: tc.initial, AllowBookmarks: tc.bookmarks}
			if tc.rv != nil {
				req.ResourceVersion = tc.rv(r1, r2)
			}
			st := e.watchOne(ns, req)
			var want []string
			for _, w := range tc.want {
				want = append(want, strings.ReplaceAll(w, "NS", ns))
			}
			got := recvFrames(t, st, len(want))
			if !slices.Equal(descs(got), want) {
				t.Fatalf("frames %v, want %v", descs(got), want)
			}
			for _, f := range got {
				switch {
				case f.desc == "BOOKMARK end" && f.rv < r2:
					t.Errorf("the end bookmark at %d, before the state's revision %d", f.rv, r2)
				case f.desc == "ADDED "+ns+"/cm0" && f.rv != r1, f.desc == "ADDED "+ns+"/cm1" && f.rv != r2:
					t.Errorf("%s at %d (cm0 is at %d, cm1 at %d)", f.desc, f.rv, r1, r2)
				}
			}
			// Live: the next change follows.
			r3 := e.put(ns, "cm0", map[string]string{"v": "2"})
			live := recvFrames(t, st, 1)
			if len(live) != 1 || live[0].desc != "MODIFIED "+ns+"/cm0" || live[0].rv != r3 {
				t.Fatalf("live: %v, want MODIFIED %s/cm0 at %d", live, ns, r3)
			}
		})
	}
}

func rvConst(rv string) func(int64, int64) string { return func(int64, int64) string { return rv } }

// rvOf is the revision of the case's n-th write (1: cm0, 2: cm1).
func rvOf(n int) func(int64, int64) string {
	return func(r1, r2 int64) string { return strconv.FormatInt([]int64{r1, r2}[n-1], 10) }
}

// TestSetupWaitsForCredit: a watch with a credit window sends its initial
// events one message per credit, the first (empty) message included; out
// of credit its setup waits, holding back the rest, until the client
// grants more; then it goes live.
func TestSetupWaitsForCredit(t *testing.T) {
	e := newTestEnv(t, cache.Options{}, Config{MaxBatchBytes: 1}) // a message per frame
	for i := range 4 {
		e.put("credit", fmt.Sprintf("cm%d", i), nil)
	}
	m := e.watchMany()
	m.open(1, 2, "credit", &watchv1.WatchRequest{ResourceVersion: "0"})
	m.first(1)
	got := m.framesOf(1, 1)
	w := e.registered(1)
	eventually(t, "waiting for credit", func() bool { return waitingForCredit(w) })
	if n := e.sends.Load(); n != 2 {
		t.Fatalf("%d messages sent with a window of 2", n)
	}
	m.credit(1, 1)
	got = append(got, m.framesOf(1, 1)...)
	eventually(t, "waiting for credit again", func() bool { return waitingForCredit(w) })
	if n := e.sends.Load(); n != 3 {
		t.Fatalf("%d messages sent with 3 credits", n)
	}
	m.credit(1, 10)
	got = append(got, m.framesOf(1, 2)...)
	if want := []string{"ADDED credit/cm0", "ADDED credit/cm1", "ADDED credit/cm2", "ADDED credit/cm3"}; !slices.Equal(got, want) {
		t.Fatalf("initial events %v, want %v", got, want)
	}
	// Live: the setup is over (its credit channel is gone) and what is
	// left of the grant carries the next change.
	eventually(t, "done with its setup", func() bool {
		w.creditMu.Lock()
		defer w.creditMu.Unlock()
		return w.creditCh == nil
	})
	if c := w.credit.Load(); c != 8 {
		t.Fatalf("credit %d after 5 messages of 13 granted", c)
	}
	e.put("credit", "cm4", nil)
	if got := m.framesOf(1, 1); !slices.Equal(got, []string{"ADDED credit/cm4"}) {
		t.Fatalf("live %v", got)
	}
}

// TestLiveWatchSendsOnlyWithCredit: a live watch out of credit goes idle
// with its events queued (the stream's sender never waits for one watch),
// and sends them, in order, once credit is granted.
func TestLiveWatchSendsOnlyWithCredit(t *testing.T) {
	e := newTestEnv(t, cache.Options{}, Config{MaxBatchBytes: 1})
	m := e.watchMany()
	// Changes only; the first message leaves two credits.
	m.open(1, 3, "live", &watchv1.WatchRequest{ResourceVersionMatch: notOlderThan, SendInitialEvents: new(bool)})
	m.first(1)
	w := e.registered(1)
	for i := range 5 {
		e.put("live", fmt.Sprintf("cm%d", i), nil)
	}
	got := m.framesOf(1, 2)
	eventually(t, "idle out of credit", func() bool { return !w.sched.Load() && w.credit.Load() <= 0 })
	if c := w.credit.Load(); c != 0 {
		t.Fatalf("credit %d: sent without credit", c)
	}
	if n := e.sends.Load(); n != 3 {
		t.Fatalf("%d messages sent with a window of 3", n)
	}
	m.credit(1, 10)
	got = append(got, m.framesOf(1, 3)...)
	want := []string{"ADDED live/cm0", "ADDED live/cm1", "ADDED live/cm2", "ADDED live/cm3", "ADDED live/cm4"}
	if !slices.Equal(got, want) {
		t.Fatalf("frames %v, want %v", got, want)
	}
	eventually(t, "idle with credit left", func() bool { return !w.sched.Load() })
	if c := w.credit.Load(); c != 7 {
		t.Fatalf("credit %d after 3 messages of 10 granted", c)
	}
}

// TestStoppedSetupGivesItsSlotToTheNext: initial events hold one of
// InitialEventsConcurrency slots; a watch that finds none waits parked,
// and a watch stopped while it holds one (here while it waits for credit)
// ends quietly and hands its slot to the parked watch, which then sends
// its initial events and goes live. Once no watch sends initial events
// every slot is free.
func TestStoppedSetupGivesItsSlotToTheNext(t *testing.T) {
	e := newTestEnv(t, cache.Options{}, Config{MaxBatchBytes: 1, InitialEventsConcurrency: 1})
	for i := range 3 {
		e.put("slot", fmt.Sprintf("cm%d", i), nil)
	}
	slots := e.srv.initialSlots
	parked := func() (free, waiting int) {
		slots.mu.Lock()
		defer slots.mu.Unlock()
		return slots.free, len(slots.waiting)
	}
	m := e.watchMany()
	m.open(1, 2, "slot", &watchv1.WatchRequest{ResourceVersion: "0"})
	m.first(1)
	m.framesOf(1, 1)
	holder := e.registered(1)
	eventually(t, "holding the slot out of credit", func() bool { return waitingForCredit(holder) })

	m.open(2, 0, "slot", &watchv1.WatchRequest{ResourceVersion: "0"})
	m.first(2) // established; its initial events wait for the slot
	eventually(t, "parked", func() bool { _, waiting := parked(); return waiting == 1 })

	m.cancelWatch(1)
	if got, st := m.untilEnd(1); len(got) != 0 || st != nil {
		t.Fatalf("the stopped watch ended with %v and status %v, want neither", got, st)
	}
	if got, want := m.framesOf(2, 3), []string{"ADDED slot/cm0", "ADDED slot/cm1", "ADDED slot/cm2"}; !slices.Equal(got, want) {
		t.Fatalf("the parked watch's initial events %v, want %v", got, want)
	}
	eventually(t, "every slot free", func() bool { free, waiting := parked(); return free == 1 && waiting == 0 })
	e.put("slot", "cm3", nil)
	if got := m.framesOf(2, 1); !slices.Equal(got, []string{"ADDED slot/cm3"}) {
		t.Fatalf("live %v", got)
	}
}

// TestWatchEnds: how a watch ends once it is established. A timeout or a
// cancel ends it quietly (an end message without status); an error — its
// resourceVersion older than the history (410 Expired), or falling
// WatcherBuffer events behind (429, reported once it may send again) — is
// one ERROR frame, then the end without status. The stream serves on,
// and nothing of the ended watches is left scheduled.
func TestWatchEnds(t *testing.T) {
	e := newTestEnv(t, cache.Options{WatcherBuffer: 2, HistoryMaxEvents: 2}, Config{})
	m := e.watchMany()
	ends := func(id int64, want ...string) {
		t.Helper()
		m.first(id)
		got, st := m.untilEnd(id)
		if !slices.Equal(got, want) || st != nil {
			t.Fatalf("watch %d ended with %v and status %v, want %v and none", id, got, st, want)
		}
	}

	// Its timeout.
	m.open(1, 0, "ends", &watchv1.WatchRequest{ResourceVersion: "0", TimeoutSeconds: 1})
	ends(1)

	// Cancelled.
	m.open(2, 0, "ends", &watchv1.WatchRequest{ResourceVersion: "0"})
	m.first(2)
	m.cancelWatch(2)
	if got, st := m.untilEnd(2); len(got) != 0 || st != nil {
		t.Fatalf("cancelled watch ended with %v and status %v", got, st)
	}

	// From a resourceVersion the history no longer holds.
	old := e.put("ends", "a", nil)
	for i := range 3 {
		e.put("ends", fmt.Sprintf("b%d", i), nil) // the history keeps 2
	}
	m.open(3, 0, "ends", &watchv1.WatchRequest{ResourceVersion: strconv.FormatInt(old, 10)})
	ends(3, "ERROR 410 Expired")

	// Too slow: out of credit (the first message took it), its events
	// overflow its buffer of 2; the 429 goes once it has credit again.
	m.open(4, 1, "slow", &watchv1.WatchRequest{ResourceVersion: "0"})
	w := e.registered(4)
	for i := range 3 {
		e.put("slow", fmt.Sprintf("cm%d", i), nil)
	}
	eventually(t, "cut off", func() bool { return !w.sched.Load() && w.sub.Pending() })
	m.credit(4, 1)
	ends(4, "ERROR 429 TooManyRequests")

	m.open(5, 0, "ends", &watchv1.WatchRequest{ResourceVersionMatch: notOlderThan, SendInitialEvents: new(bool)})
	m.first(5)
	e.registered(5)
	e.srv.deadlines.mu.Lock()
	defer e.srv.deadlines.mu.Unlock()
	if n := len(e.srv.deadlines.h); n != 1 {
		t.Fatalf("%d watches scheduled, want only the open one", n)
	}
}

// TestWatchErrorsBeforeStart: a watch that cannot start fails before its
// first message with the Kubernetes Status of the reason — over Watch as
// the stream's gRPC status, over WatchMany as the status of the watch's
// end message.
func TestWatchErrorsBeforeStart(t *testing.T) {
	e := newTestEnv(t, cache.Options{}, Config{})
	m := e.watchMany()
	for i, tc := range []struct {
		name   string
		req    *watchv1.WatchRequest
		code   int32
		reason metav1.StatusReason
	}{
		{"a resource not served", &watchv1.WatchRequest{Resource: &watchv1.Resource{Group: "example.com", Version: "v1", Resource: "things"}},
			http.StatusNotFound, metav1.StatusReasonNotFound},
		{"an unknown encoding", &watchv1.WatchRequest{Encoding: 99}, http.StatusBadRequest, metav1.StatusReasonBadRequest},
		{"an unknown includeObject", &watchv1.WatchRequest{Encoding: watchv1.Encoding_ENCODING_TABLE, IncludeObject: "Everything"},
			http.StatusBadRequest, metav1.StatusReasonBadRequest},
		{"a broken label selector", &watchv1.WatchRequest{LabelSelector: "a in ("}, http.StatusBadRequest, metav1.StatusReasonBadRequest},
		{"a resourceVersion that is no number", &watchv1.WatchRequest{ResourceVersion: "abc"}, http.StatusBadRequest, metav1.StatusReasonBadRequest},
	} {
		check := func(via string, st *status.Status) {
			t.Helper()
			got := apistatus.FromGRPC(st)
			if got.Code != tc.code || got.Reason != tc.reason {
				t.Errorf("%s over %s: %d %s (%s), want %d %s", tc.name, via, got.Code, got.Reason, got.Message, tc.code, tc.reason)
			}
		}
		req := proto.Clone(tc.req).(*watchv1.WatchRequest)
		if req.Resource == nil {
			req.Resource = configMaps
		}
		ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
		st, err := e.client.Watch(ctx, req)
		if err == nil {
			_, err = st.Recv()
		}
		cancel()
		if err == nil {
			t.Fatalf("%s over Watch: a first message", tc.name)
		}
		check("Watch", status.Convert(err))

		id := int64(i + 1)
		m.open(id, 0, "", proto.Clone(tc.req).(*watchv1.WatchRequest))
		got, end := m.untilEnd(id)
		if len(got) != 0 || end == nil {
			t.Fatalf("%s over WatchMany: frames %v, status %v", tc.name, got, end)
		}
		check("WatchMany", end)
	}
}
