package resources

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/watchfanoutclient"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// refusingReplica is a watchfanout replica that serves nothing: every call
// gets err (UNIMPLEMENTED unless set, as from a server without the
// WatchService), and the methods called are recorded, so a test sees which
// reads the gateway sent to watchfanout, and which the store then served.
type refusingReplica struct {
	mu    sync.Mutex
	err   error
	calls []string
}

func (r *refusingReplica) handle(_ any, stream grpc.ServerStream) error {
	m, _ := grpc.MethodFromServerStream(stream)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, path.Base(m))
	return r.err
}

// answer makes every later call fail with err.
func (r *refusingReplica) answer(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
}

// called returns the methods called since the last call of called.
func (r *refusingReplica) called() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

// newRoutingEnv is an env whose Server has one watchfanout replica, a
// refusingReplica, and counts its reads in a registry of its own.
func newRoutingEnv(t *testing.T) (*env, *refusingReplica) {
	t.Helper()
	r := &refusingReplica{err: grpcstatus.Error(codes.Unimplemented, "unknown service meridian.watch.v1.WatchService")}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(r.handle))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return newEnv(t, Config{Watchfanout: watchfanoutclient.New([]*grpc.ClientConn{conn}), Registerer: prometheus.NewRegistry()}), r
}

// Accept headers.
const (
	acceptJSON        = negotiation.JSON
	acceptYAML        = negotiation.YAML
	acceptProtobuf    = negotiation.Protobuf
	acceptTable       = "application/json;as=Table;g=meta.k8s.io;v=v1"
	acceptPartial     = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
	acceptPartialList = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
)

// read is one read of the routing tests: a get, list or watch of the
// ConfigMaps of namespace "routing".
type read struct {
	verb                    string // get, list or watch
	rv, match, accept, cont string
	limit                   int64
	wantTier                []string // the watchfanout methods it may call; nil: none
}

// watchStream is a Watch's stream that ends the watch once it has sent an
// event: a watch does not end by itself.
type watchStream struct {
	listStream
	cancel context.CancelFunc
}

func (w *watchStream) Send(b *httpbody.HttpBody) error {
	if len(b.GetData()) > 0 {
		w.cancel()
	}
	return w.listStream.Send(b)
}

// do runs the read and returns what the client got.
func (e *env) do(rd read) ([]byte, error) {
	ref := configMap("routing", "")
	ctx := e.t.Context()
	switch rd.verb {
	case "get":
		b, err := e.s.Get(ctx, &apiv1.GetRequest{Ref: configMap("routing", "routed"), ResourceVersion: rd.rv, Accept: rd.accept})
		return b.GetData(), err
	case "list":
		ls := &listStream{ctx: ctx}
		err := e.s.List(&apiv1.ListRequest{Ref: ref, ResourceVersion: rd.rv, ResourceVersionMatch: rd.match, ContinueToken: rd.cont, Limit: rd.limit, Accept: rd.accept}, ls)
		return ls.body(), err
	case "watch":
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ws := &watchStream{listStream: listStream{ctx: ctx}, cancel: cancel}
		err := e.s.Watch(&apiv1.WatchRequest{Ref: ref, ResourceVersion: rd.rv, Accept: rd.accept}, ws)
		return ws.body(), err
	}
	e.t.Fatalf("no verb %q", rd.verb)
	return nil, nil
}

// continueToken returns the continue token of a first page of one object
// of the routing tests' ConfigMaps.
func (e *env) continueToken() string {
	e.t.Helper()
	first, err := e.do(read{verb: "list", accept: acceptJSON, limit: 1})
	if err != nil {
		e.t.Fatal(err)
	}
	var page metav1.List
	if err := json.Unmarshal(first, &page); err != nil || page.Continue == "" {
		e.t.Fatalf("no continue token in %s (%v)", first, err)
	}
	return page.Continue
}

// TestReadRouting: which reads go to watchfanout first and which only to
// the store (cacheable, cacheEncoding, and Get/List/Watch's checks), read
// against a replica that serves nothing, so that every read ends up served
// by the store, which must give the whole answer.
func TestReadRouting(t *testing.T) {
	e, replica := newRoutingEnv(t)
	e.namespace("routing")
	e.mustCreate(configMap("routing", ""), `{"metadata":{"name":"routed"},"data":{"k":"v"}}`)
	e.mustCreate(configMap("routing", ""), `{"metadata":{"name":"routed-too"}}`)
	rv := strconv.FormatInt(e.revision(), 10)

	cont := e.continueToken()
	replica.called()

	get, streamList, list := []string{"Get"}, []string{"StreamList"}, []string{"List"}
	watch := []string{"WatchMany", "Watch"} // WatchMany, or Watch where WatchMany is not served
	for _, c := range []struct {
		name string
		rd   read
	}{
		{"get, consistent", read{verb: "get", accept: acceptJSON}},
		{"get rv=0", read{verb: "get", rv: "0", accept: acceptJSON, wantTier: get}},
		{"get rv=N", read{verb: "get", rv: rv, accept: acceptJSON, wantTier: get}},
		{"get rv=0 as protobuf", read{verb: "get", rv: "0", accept: acceptProtobuf, wantTier: get}},
		{"get rv=0 as a Table", read{verb: "get", rv: "0", accept: acceptTable, wantTier: get}},
		{"get rv=0 as YAML", read{verb: "get", rv: "0", accept: acceptYAML}},
		{"get rv=0 as PartialObjectMetadata", read{verb: "get", rv: "0", accept: acceptPartial}},
		{"list, consistent", read{verb: "list", accept: acceptJSON, wantTier: streamList}},
		{"list, consistent, as protobuf", read{verb: "list", accept: acceptProtobuf, wantTier: streamList}},
		{"list, consistent, as a Table", read{verb: "list", accept: acceptTable, wantTier: list}},
		{"list, consistent, as YAML", read{verb: "list", accept: acceptYAML}},
		{"list, consistent, as metadata", read{verb: "list", accept: acceptPartialList}},
		{"list rv=0", read{verb: "list", rv: "0", accept: acceptJSON, wantTier: streamList}},
		{"list rv=N NotOlderThan", read{verb: "list", rv: rv, match: "NotOlderThan", accept: acceptProtobuf, wantTier: streamList}},
		{"list rv=N Exact", read{verb: "list", rv: rv, match: "Exact", accept: acceptJSON}},
		{"list rv=N Exact as protobuf", read{verb: "list", rv: rv, match: "Exact", accept: acceptProtobuf}},
		{"list continue", read{verb: "list", cont: cont, accept: acceptJSON, wantTier: streamList}},
		{"watch", read{verb: "watch", accept: acceptJSON, wantTier: watch}},
		{"watch rv=0 as protobuf", read{verb: "watch", rv: "0", accept: acceptProtobuf, wantTier: watch}},
		{"watch as a Table", read{verb: "watch", accept: acceptTable, wantTier: watch}},
		{"watch as PartialObjectMetadata events", read{verb: "watch", accept: acceptPartial}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rd := c.rd
			body, err := e.do(rd)
			if err != nil {
				t.Fatalf("the store did not serve it: %v", err)
			}
			called := replica.called()
			if len(called) == 0 != (rd.wantTier == nil) || slices.ContainsFunc(called, func(m string) bool { return !slices.Contains(rd.wantTier, m) }) {
				t.Errorf("watchfanout was called with %v, want one of %v", called, rd.wantTier)
			}
			if !bytes.Contains(body, []byte("routed")) {
				t.Errorf("the answer does not hold the object: %q", body)
			}
		})
	}
}

// TestReadFallsBackToTheStore: which answers of watchfanout send a read to
// the store (fallBack, lagged, listFailed) and which reach the client, and
// how consistent lists are counted in
// apiserver_watch_cache_consistent_read_total.
func TestReadFallsBackToTheStore(t *testing.T) {
	e, replica := newRoutingEnv(t)
	e.namespace("routing")
	e.mustCreate(configMap("routing", ""), `{"metadata":{"name":"routed"}}`)
	e.mustCreate(configMap("routing", ""), `{"metadata":{"name":"routed-too"}}`)
	cont := e.continueToken()

	reads := map[string]read{
		"consistent list":             {verb: "list", accept: acceptJSON},
		"consistent list as protobuf": {verb: "list", accept: acceptProtobuf},
		"continued list":              {verb: "list", cont: cont, accept: acceptJSON},
		"list rv=0":                   {verb: "list", rv: "0", accept: acceptJSON},
		"get rv=0":                    {verb: "get", rv: "0", accept: acceptJSON},
		"watch":                       {verb: "watch", accept: acceptJSON},
	}
	const (
		store = 0 // served by the store
		wf    = 1 // watchfanout's answer reaches the client
	)
	for _, c := range []struct {
		name string
		err  error
		// want says, per read, who answers; reads not named are not tried.
		want map[string]int
		// counted is the consistent_read_total series a consistent list
		// counts: success, fallback.
		counted [2]bool
	}{
		{"unavailable", grpcstatus.Error(codes.Unavailable, "not synced"),
			map[string]int{"consistent list": store, "consistent list as protobuf": store, "continued list": store, "list rv=0": store, "get rv=0": store, "watch": store}, [2]bool{false, true}},
		{"unimplemented", grpcstatus.Error(codes.Unimplemented, "unknown service"),
			map[string]int{"consistent list": store, "consistent list as protobuf": store, "continued list": store, "list rv=0": store, "get rv=0": store, "watch": store}, [2]bool{false, true}},
		{"over the message limit", grpcstatus.Error(codes.ResourceExhausted, "message larger than max"),
			map[string]int{"consistent list": store, "consistent list as protobuf": store, "continued list": store, "list rv=0": store, "get rv=0": store, "watch": store}, [2]bool{false, true}},
		{"lagged the store (504)", apistatus.ToGRPC(apistatus.TooLargeResourceVersion(100, 99)),
			map[string]int{"consistent list": store, "consistent list as protobuf": store, "continued list": wf, "list rv=0": wf, "get rv=0": wf}, [2]bool{false, true}},
		{"compacted (410)", apistatus.ToGRPC(apierrors.NewResourceExpired("too old resource version: 1 (5)")),
			map[string]int{"consistent list": wf, "consistent list as protobuf": wf, "continued list": store, "list rv=0": wf, "get rv=0": wf}, [2]bool{false, false}},
		{"refused (400)", apistatus.ToGRPC(apierrors.NewBadRequest("unable to parse requirement")),
			map[string]int{"consistent list": wf, "consistent list as protobuf": wf, "continued list": wf, "list rv=0": wf, "get rv=0": wf}, [2]bool{false, false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			replica.answer(c.err)
			want := apistatus.FromError(c.err)
			for name, who := range c.want {
				counter := e.s.m.consistentReads.WithLabelValues("configmaps", strconv.FormatBool(c.counted[0]), strconv.FormatBool(c.counted[1]))
				before := testutil.ToFloat64(counter)
				body, err := e.do(reads[name])
				switch {
				case who == store && err != nil:
					t.Errorf("%s: the store did not serve it: %v", name, err)
				case who == store && !bytes.Contains(body, []byte("routed")):
					t.Errorf("%s: the answer does not hold the object: %q", name, body)
				case who == wf && (statusOf(err).Code != want.Code || statusOf(err).Message != want.Message):
					t.Errorf("%s: got %v, want watchfanout's %d %q", name, err, want.Code, want.Message)
				}
				if got := testutil.ToFloat64(counter) - before; consistentList(name) && got != 1 || !consistentList(name) && got != 0 {
					t.Errorf("%s: consistent_read_total{success=%t,fallback=%t} went up by %v", name, c.counted[0], c.counted[1], got)
				}
			}
			if len(replica.called()) == 0 {
				t.Error("nothing was sent to watchfanout")
			}
		})
	}
}

// consistentList reports whether a read of TestReadFallsBackToTheStore is
// a consistent list, which the metric counts.
func consistentList(name string) bool {
	return name == "consistent list" || name == "consistent list as protobuf"
}

// TestRoutingRules: the rules of which reads watchfanout may serve, alone.
func TestRoutingRules(t *testing.T) {
	t.Run("cacheable", func(t *testing.T) {
		for _, c := range []struct {
			rv, match    string
			consistentOK bool
			want         bool
		}{
			{"", "", false, false},
			{"", "", true, true},
			{"0", "", false, true},
			{"12", "", false, true},
			{"12", "NotOlderThan", false, true},
			{"12", "Exact", false, false},
			{"12", "Exact", true, false},
			{"0", "NotOlderThan", true, true},
		} {
			if got := cacheable(c.rv, c.match, c.consistentOK); got != c.want {
				t.Errorf("cacheable(%q, %q, %t) = %t, want %t", c.rv, c.match, c.consistentOK, got, c.want)
			}
		}
	})
	t.Run("cacheEncoding", func(t *testing.T) {
		for _, c := range []struct {
			accept string
			want   watchv1.Encoding
			ok     bool
		}{
			{"", watchv1.Encoding_ENCODING_JSON, true},
			{acceptJSON, watchv1.Encoding_ENCODING_JSON, true},
			{acceptProtobuf, watchv1.Encoding_ENCODING_PROTOBUF, true},
			{acceptTable, watchv1.Encoding_ENCODING_TABLE, true},
			{acceptYAML, 0, false},
			{acceptPartial, 0, false},
			{"application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", 0, false},
		} {
			out, err := negotiateOutput(c.accept, "", negotiation.Reads)
			if err != nil {
				t.Fatal(err)
			}
			if got, ok := cacheEncoding(out); got != c.want || ok != c.ok {
				t.Errorf("cacheEncoding(%q) = %v, %t; want %v, %t", c.accept, got, ok, c.want, c.ok)
			}
		}
	})
	t.Run("fallBack", func(t *testing.T) {
		for code, want := range map[codes.Code]bool{
			codes.Unavailable: true, codes.Unimplemented: true, codes.ResourceExhausted: true,
			codes.DeadlineExceeded: false, codes.NotFound: false, codes.InvalidArgument: false, codes.Internal: false, codes.Canceled: false,
		} {
			if got := fallBack(grpcstatus.Error(code, "x")); got != want {
				t.Errorf("fallBack(%v) = %t, want %t", code, got, want)
			}
		}
	})
	t.Run("lagged", func(t *testing.T) {
		ended, cancel := context.WithCancel(t.Context())
		cancel()
		for _, c := range []struct {
			ctx  context.Context
			code codes.Code
			want bool
		}{
			{t.Context(), codes.DeadlineExceeded, true},
			{ended, codes.DeadlineExceeded, false}, // the caller gave up: nobody waits for the store
			{t.Context(), codes.Unavailable, false},
			{t.Context(), codes.NotFound, false},
		} {
			if got := lagged(c.ctx, grpcstatus.Error(c.code, "x")); got != c.want {
				t.Errorf("lagged(ctx ended %t, %v) = %t, want %t", c.ctx.Err() != nil, c.code, got, c.want)
			}
		}
		if http.StatusGatewayTimeout != apistatus.FromError(apistatus.ToGRPC(apistatus.TooLargeResourceVersion(2, 1))).Code ||
			grpcstatus.Code(apistatus.ToGRPC(apistatus.TooLargeResourceVersion(2, 1))) != codes.DeadlineExceeded {
			t.Error("a 504 from watchfanout does not arrive as DEADLINE_EXCEEDED")
		}
	})
}
