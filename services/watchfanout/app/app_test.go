package app_test

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/app"
)

func ptr[T any](v T) *T { return &v }

func apiStatus(t *testing.T, err error) *apiv1.Status {
	t.Helper()
	for _, d := range status.Convert(err).Details() {
		if s, ok := d.(*apiv1.Status); ok {
			return s
		}
	}
	t.Fatalf("no api.v1.Status in %v", err)
	return nil
}

func TestHealthMetricsAndPreStreamErrors(t *testing.T) {
	e := newEnv(t, app.Config{})
	resp, err := healthpb.NewHealthClient(e.clients[0]).Check(t.Context(), &healthpb.HealthCheckRequest{Service: app.ServiceName})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", resp, err)
	}
	// Unknown resource, bad selector, bad resourceVersion: gRPC errors
	// with a Status detail, before any message.
	for _, tc := range []struct {
		req  *watchv1.WatchRequest
		code codes.Code
		http int32
	}{
		{&watchv1.WatchRequest{Resource: &watchv1.Resource{Version: "v1", Resource: "pods"}}, codes.NotFound, 404},
		{&watchv1.WatchRequest{Resource: cmResource, LabelSelector: "a in (("}, codes.InvalidArgument, 400},
		{&watchv1.WatchRequest{Resource: cmResource, FieldSelector: "spec.x=1"}, codes.InvalidArgument, 400},
		{&watchv1.WatchRequest{Resource: cmResource, ResourceVersion: "x"}, codes.InvalidArgument, 400},
		{&watchv1.WatchRequest{Resource: cmResource, SendInitialEvents: ptr(true)}, codes.InvalidArgument, 400},
	} {
		_, err := e.openWatch(t.Context(), tc.req)
		if status.Code(err) != tc.code || apiStatus(t, err).GetCode() != tc.http {
			t.Errorf("%v: %v, want %v/%d", tc.req, err, tc.code, tc.http)
		}
	}
	if _, err := e.watch.Get(t.Context(), &watchv1.GetRequest{Resource: cmResource, Namespace: "a", Name: "missing"}); status.Code(err) != codes.NotFound || apiStatus(t, err).GetReason() != "NotFound" {
		t.Fatalf("Get missing: %v", err)
	}
	if n := testutil.CollectAndCount(e.reg, "watchfanout_cache_lists_total"); n == 0 {
		t.Fatal("no cache metrics")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, ok := range []string{"store:7001", "127.0.0.1:7001", "[::1]:7001", "dns:///store.meridian.svc:7001", "10.0.0.1:7001,10.0.0.2:7001, 10.0.0.3:7001"} {
		if err := (&app.Config{StoreAddress: ok}).Validate(); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "store", " , ", "store-0:7001,store-1"} {
		err := (&app.Config{StoreAddress: bad}).Validate()
		if err == nil || !strings.Contains(err.Error(), "StoreAddress") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	err := (&app.Config{StoreAddress: "s:1", WatcherBuffer: -1, HistoryWindow: -1}).Validate()
	if err == nil || !strings.Contains(err.Error(), "WatcherBuffer") || !strings.Contains(err.Error(), "HistoryWindow") {
		t.Fatalf("Validate: %v", err)
	}
	if _, err := app.New(t.Context(), app.Config{}); err == nil {
		t.Fatal("New without a store address")
	}
}

func TestInitialEventsThenBookmarkThenChanges(t *testing.T) {
	initialEventsThenBookmarkThenChanges(t, newEnv(t, app.Config{}))
}

func initialEventsThenBookmarkThenChanges(t *testing.T, e *env) {
	var last int64
	for i := range 5 {
		last = e.mustPut(configMap("ns", fmt.Sprintf("cm-%d", i), nil, "x"))
	}
	e.mustPut(configMap("other", "elsewhere", nil, "x"))
	// sendInitialEvents with RV unset is consistent: every write above is
	// in the initial events.
	s := e.mustWatch(&watchv1.WatchRequest{Resource: cmResource, Namespace: "ns", SendInitialEvents: ptr(true), ResourceVersionMatch: "NotOlderThan", AllowBookmarks: true})
	for i := range 5 {
		s.expect(t, "ADDED", fmt.Sprintf("cm-%d", i))
	}
	bm := s.expect(t, "BOOKMARK", "")
	if bm.Object.Metadata.Annotations["k8s.io/initial-events-end"] != "true" || bm.rv() < last {
		t.Fatalf("end bookmark %+v, want annotated at >= %d", bm.Object.Metadata, last)
	}
	rev := e.mustPut(configMap("ns", "cm-0", nil, "y"))
	if ev := s.expect(t, "MODIFIED", "cm-0"); ev.rv() != rev || ev.Object.Data["d"] != "y" {
		t.Fatalf("modified %+v, want rv %d", ev, rev)
	}
	// RV unset without sendInitialEvents: ADDED state, no bookmark.
	s2 := e.mustWatch(&watchv1.WatchRequest{Resource: cmResource, Namespace: "ns"})
	for i := range 5 {
		s2.expect(t, "ADDED", fmt.Sprintf("cm-%d", i))
	}
	e.mustPut(configMap("ns", "cm-9", nil, "z"))
	s2.expect(t, "ADDED", "cm-9")
	// sendInitialEvents=false: only changes.
	s3 := e.mustWatch(&watchv1.WatchRequest{Resource: cmResource, Namespace: "ns", SendInitialEvents: ptr(false), ResourceVersionMatch: "NotOlderThan"})
	e.mustPut(configMap("ns", "cm-10", nil, "z"))
	s3.expect(t, "ADDED", "cm-10")
}

func TestSelectorTransitions(t *testing.T) {
	selectorTransitions(t, newEnv(t, app.Config{}))
}

func selectorTransitions(t *testing.T, e *env) {
	start := e.mustPut(configMap("ns", "unrelated", nil, ""))
	s := e.mustWatch(&watchv1.WatchRequest{Resource: cmResource, LabelSelector: "app=a", ResourceVersion: strconv.FormatInt(start, 10)})
	e.mustPut(configMap("ns", "cm", map[string]string{"app": "a"}, "1"))
	e.mustPut(configMap("ns", "cm", map[string]string{"app": "b"}, "2"))
	e.mustPut(configMap("ns", "cm", map[string]string{"app": "a"}, "3"))
	e.mustPut(configMap("ns", "cm", map[string]string{"app": "a"}, "4"))
	del, err := e.del(t.Context(), "ns", "cm")
	if err != nil {
		t.Fatal(err)
	}
	check := func(s *stream) {
		s.expect(t, "ADDED", "cm")
		left := s.expect(t, "DELETED", "cm")
		// Leaving the selector: the previous state at the event's revision.
		if left.Object.Metadata.Labels["app"] != "a" || left.rv() != start+2 {
			t.Fatalf("left: %+v", left.Object)
		}
		s.expect(t, "ADDED", "cm")
		s.expect(t, "MODIFIED", "cm")
		if ev := s.expect(t, "DELETED", "cm"); ev.rv() != del || ev.Object.Data["d"] != "4" {
			t.Fatalf("deleted: %+v, want rv %d", ev.Object, del)
		}
	}
	check(s)
	// The same from the history.
	check(e.mustWatch(&watchv1.WatchRequest{Resource: cmResource, LabelSelector: "app=a", ResourceVersion: strconv.FormatInt(start, 10)}))
}

func TestWatchOlderThanHistoryIs410(t *testing.T) {
	e := newEnv(t, app.Config{HistoryMaxEvents: 10})
	first := e.mustPut(configMap("ns", "cm", nil, "0"))
	for i := range 20 {
		e.mustPut(configMap("ns", "cm", nil, strconv.Itoa(i)))
	}
	s := e.mustWatch(&watchv1.WatchRequest{Resource: cmResource, ResourceVersion: strconv.FormatInt(first, 10)})
	ev := s.expect(t, "ERROR", "")
	if ev.Object.Code != 410 || ev.Object.Reason != "Expired" {
		t.Fatalf("error %+v, want 410 Expired", ev.Object)
	}
	if _, ok := <-s.events; ok {
		t.Fatal("stream continued after ERROR")
	}

	// After the store compacted, a restarted replica's history starts at
	// the compaction: older revisions are 410 too.
	rev := e.mustPut(configMap("ns", "cm", nil, "x"))
	if _, err := e.kv.Compact(t.Context(), &storev1.CompactRequest{Revision: rev}); err != nil {
		t.Fatal(err)
	}
	e.stopFanout()
	e.cfg.HistoryMaxEvents = 0
	e.startFanout("127.0.0.1:0")
	s = e.mustWatch(&watchv1.WatchRequest{Resource: cmResource, ResourceVersion: strconv.FormatInt(rev-5, 10)})
	if ev := s.expect(t, "ERROR", ""); ev.Object.Code != 410 {
		t.Fatalf("after compaction: %+v", ev.Object)
	}
	// From the compacted revision itself: fine.
	s = e.mustWatch(&watchv1.WatchRequest{Resource: cmResource, ResourceVersion: strconv.FormatInt(rev, 10)})
	next := e.mustPut(configMap("ns", "cm", nil, "y"))
	if ev := s.expect(t, "MODIFIED", "cm"); ev.rv() != next {
		t.Fatalf("rv %d want %d", ev.rv(), next)
	}
}

func TestEncodingsAndBookmarks(t *testing.T) {
	e := newEnv(t, app.Config{BookmarkInterval: 200 * time.Millisecond})
	rev := e.mustPut(configMap("ns", "cm", nil, "x"))
	ctx := t.Context()
	// Protobuf: length-prefixed frames.
	cl, err := e.watch.Watch(ctx, &watchv1.WatchRequest{Resource: cmResource, ResourceVersion: "0", Encoding: watchv1.Encoding_ENCODING_PROTOBUF})
	if err != nil {
		t.Fatal(err)
	}
	cl.Recv()
	resp, err := cl.Recv()
	if err != nil {
		t.Fatal(err)
	}
	f := resp.GetFrames()
	if len(f) < 4 || int(binary.BigEndian.Uint32(f))+4 != len(f) || resp.GetResourceVersion() != strconv.FormatInt(rev, 10) {
		t.Fatalf("protobuf frame %q rv %s", f, resp.GetResourceVersion())
	}
	// Table: JSON frames of Tables.
	s := e.mustWatch(&watchv1.WatchRequest{Resource: cmResource, ResourceVersion: "0", Encoding: watchv1.Encoding_ENCODING_TABLE})
	if ev := s.next(t); ev.Type != "ADDED" || ev.Object.Kind != "Table" {
		t.Fatalf("table event %+v", ev)
	}
	// Periodic bookmarks. One may come before the write's event (the
	// write can take longer than the interval): at the watch's start
	// revision, never past the write. One follows the event, at or past it.
	s = e.mustWatch(&watchv1.WatchRequest{Resource: cmResource, ResourceVersion: strconv.FormatInt(rev, 10), AllowBookmarks: true})
	rev2 := e.mustPut(configMap("ns", "cm", nil, "y"))
	ev := s.next(t)
	for ev.Type == "BOOKMARK" {
		if ev.rv() < rev || ev.rv() >= rev2 {
			t.Fatalf("bookmark before the write's event at rv %d, want in [%d, %d)", ev.rv(), rev, rev2)
		}
		ev = s.next(t)
	}
	if ev.Type != "MODIFIED" || ev.Object.Metadata.Name != "cm" || ev.rv() != rev2 {
		t.Fatalf("got %s %s (rv %d), want MODIFIED cm at %d", ev.Type, ev.Object.Metadata.Name, ev.rv(), rev2)
	}
	if bm := s.expect(t, "BOOKMARK", ""); bm.rv() < rev2 {
		t.Fatalf("bookmark rv %d after the write at %d", bm.rv(), rev2)
	}
	// timeoutSeconds ends the stream cleanly.
	s = e.mustWatch(&watchv1.WatchRequest{Resource: cmResource, ResourceVersion: strconv.FormatInt(rev2, 10), TimeoutSeconds: 1})
	select {
	case _, ok := <-s.events:
		if ok {
			t.Fatal("unexpected event")
		}
		if s.err != nil {
			t.Fatalf("timeout ended with %v", s.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not time out")
	}
}

func TestConsistentListAndPagination(t *testing.T) {
	e := newEnv(t, app.Config{})
	ctx := t.Context()
	type listed struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
			Continue        string `json:"continue"`
		} `json:"metadata"`
		Items []struct {
			Metadata struct {
				Name            string `json:"name"`
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		} `json:"items"`
	}
	list := func(req *watchv1.ListRequest) (listed, *watchv1.ListResponse) {
		t.Helper()
		resp, err := e.watch.List(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var l listed
		if err := json.Unmarshal(resp.GetData(), &l); err != nil {
			t.Fatal(err)
		}
		return l, resp
	}
	// Every write acknowledged before a consistent list is in it, while
	// other writes go on.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			e.put(ctx, configMap("noise", fmt.Sprintf("n-%d", i%20), nil, strconv.Itoa(i)))
		}
	}()
	for i := range 40 {
		name := fmt.Sprintf("cm-%02d", i)
		rev := e.mustPut(configMap("ns", name, nil, "x"))
		l, _ := list(&watchv1.ListRequest{Resource: cmResource, Namespace: "ns"})
		if len(l.Items) != i+1 || l.Items[i].Metadata.Name != name {
			t.Fatalf("consistent list after write %d (rev %d): %d items", i, rev, len(l.Items))
		}
		if got, _ := strconv.ParseInt(l.Metadata.ResourceVersion, 10, 64); got < rev {
			t.Fatalf("list rv %d < write %d", got, rev)
		}
		g, err := e.watch.Get(ctx, &watchv1.GetRequest{Resource: cmResource, Namespace: "ns", Name: name})
		if err != nil || g.GetResourceVersion() != strconv.FormatInt(rev, 10) {
			t.Fatalf("consistent get: %v %v", g, err)
		}
	}
	// Pagination reads one snapshot though writes go on.
	first, resp := list(&watchv1.ListRequest{Resource: cmResource, Namespace: "ns", Limit: 7})
	if len(first.Items) != 7 || resp.GetContinueToken() == "" || resp.GetRemainingItemCount() != 33 {
		t.Fatalf("first page: %d items, continue %q, remaining %d", len(first.Items), resp.GetContinueToken(), resp.GetRemainingItemCount())
	}
	names := []string{}
	for _, it := range first.Items {
		names = append(names, it.Metadata.Name)
	}
	e.mustPut(configMap("ns", "cm-00a", nil, "new"))
	tok := resp.GetContinueToken()
	for tok != "" {
		l, r := list(&watchv1.ListRequest{Resource: cmResource, Namespace: "ns", Limit: 7, ContinueToken: tok})
		if l.Metadata.ResourceVersion != first.Metadata.ResourceVersion {
			t.Fatalf("page rv %s != %s", l.Metadata.ResourceVersion, first.Metadata.ResourceVersion)
		}
		for _, it := range l.Items {
			names = append(names, it.Metadata.Name)
		}
		tok = r.GetContinueToken()
	}
	if len(names) != 40 {
		t.Fatalf("paginated %d items: %v", len(names), names)
	}
	close(stop)
	wg.Wait()
	// Exact at an old revision (no snapshot) is read from the store.
	rv, _ := strconv.ParseInt(first.Metadata.ResourceVersion, 10, 64)
	l, _ := list(&watchv1.ListRequest{Resource: cmResource, Namespace: "ns", ResourceVersion: strconv.FormatInt(rv-1, 10), ResourceVersionMatch: "Exact"})
	if l.Metadata.ResourceVersion != strconv.FormatInt(rv-1, 10) || len(l.Items) > 40 {
		t.Fatalf("exact list rv %s items %d", l.Metadata.ResourceVersion, len(l.Items))
	}
	// A resourceVersion the cache does not reach: 504 with the cause.
	e.cfg.ReadWaitTimeout = 0
	_, err := e.watch.Get(ctx, &watchv1.GetRequest{Resource: cmResource, Namespace: "ns", Name: "cm-00", ResourceVersion: strconv.FormatInt(rv+1_000_000, 10)})
	if st := apiStatus(t, err); st.GetCode() != 504 || !strings.Contains(string(st.GetDetailsJson()), "ResourceVersionTooLarge") {
		t.Fatalf("too large: %v %s", err, st.GetDetailsJson())
	}
	// Table list.
	tr, err := e.watch.List(ctx, &watchv1.ListRequest{Resource: cmResource, Namespace: "ns", Encoding: watchv1.Encoding_ENCODING_TABLE, Limit: 2})
	if err != nil || !strings.Contains(string(tr.GetData()), `"kind":"Table"`) || tr.GetContinueToken() == "" {
		t.Fatalf("table list: %v %s", err, tr.GetData())
	}
}
