package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	storeapp "github.com/meridian-cp/meridian/services/store/app"
	storeclient "github.com/meridian-cp/meridian/services/store/client"
	"github.com/meridian-cp/meridian/services/store/storetest"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/batchcodec"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
)

// waitLimit bounds every wait of these tests; reaching it fails the test
// (something hangs), it never decides what passes.
const waitLimit = 20 * time.Second

// configMaps is the watch.v1 resource of ConfigMaps.
var configMaps = &watchv1.Resource{Version: "v1", Resource: "configmaps"}

// testEnv is a Server over a real cache that follows a real store (one
// member: raft, pebble and gRPC on loopback), served by a gRPC server with
// watchfanout's codec over an in-memory connection (bufconn).
type testEnv struct {
	t      *testing.T
	kv     storev1.KVServiceClient // the store's
	codec  *codec.Codec
	cms    *registry.Resource
	cache  *cache.Cache
	srv    *Server
	client watchv1.WatchServiceClient
	// sends counts the messages the server sent (or began to send) on
	// all its streams.
	sends atomic.Int64
}

// newTestEnv starts a store, a cache following it with opts (Registry,
// Codec and Logger are filled in) and a Server with cfg (Cache, Codec and
// KV are filled in); it returns once the cache has synced.
func newTestEnv(t *testing.T, opts cache.Options, cfg Config) *testEnv {
	t.Helper()
	store := storetest.Start(t, storeapp.Config{ProgressInterval: 100 * time.Millisecond, CacheBytes: 8 << 20, MinFreeBytes: -1, BallastBytes: -1})
	sc, err := storeclient.Dial([]string{store.Addr}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	cdc, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	opts.Registry, opts.Codec, opts.Logger = registry.New(registry.Core()...), cdc, slog.New(slog.DiscardHandler)
	c, err := cache.New(opts, sc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_ = c.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-ran })
	select {
	case <-c.Synced():
	case <-time.After(waitLimit):
		t.Fatal("the cache did not sync")
	}
	cfg.Cache, cfg.Codec, cfg.KV = c, cdc, sc.KV()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cms, _ := opts.Registry.Lookup(corev1.SchemeGroupVersion.WithResource("configmaps"))
	e := &testEnv{t: t, kv: sc.KV(), codec: cdc, cms: cms, cache: c, srv: s}
	e.client = watchv1.NewWatchServiceClient(e.serve())
	return e
}

// serve serves e.srv on a gRPC server with the batchcodec codec, as the
// service does, over bufconn, and returns a client connection to it.
func (e *testEnv) serve() *grpc.ClientConn {
	e.t.Helper()
	bc, err := batchcodec.NewCodec()
	if err != nil {
		e.t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.ForceServerCodecV2(bc), grpc.StreamInterceptor(e.countSends))
	watchv1.RegisterWatchServiceServer(gs, e.srv)
	lis := bufconn.Listen(1 << 20)
	go func() { _ = gs.Serve(lis) }()
	e.t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	return conn
}

// countSends counts the messages a stream handler sends.
func (e *testEnv) countSends(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &countingStream{ServerStream: ss, n: &e.sends})
}

type countingStream struct {
	grpc.ServerStream
	n *atomic.Int64
}

func (s *countingStream) SendMsg(m any) error {
	s.n.Add(1)
	return s.ServerStream.SendMsg(m)
}

// put writes ConfigMap ns/name with labels, as the gateway stores it, and
// waits until the cache has applied it; it returns the revision.
func (e *testEnv) put(ns, name string, labels map[string]string) int64 {
	e.t.Helper()
	val, err := e.codec.EncodeStorage(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}})
	if err != nil {
		e.t.Fatal(err)
	}
	return e.commit(&storev1.RequestOp{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{Key: []byte(e.cms.Key(ns, name)), Value: val}}})
}

// del deletes ConfigMap ns/name and waits until the cache has applied it;
// it returns the revision.
func (e *testEnv) del(ns, name string) int64 {
	e.t.Helper()
	return e.commit(&storev1.RequestOp{Request: &storev1.RequestOp_RequestDeleteRange{RequestDeleteRange: &storev1.DeleteRangeRequest{Key: []byte(e.cms.Key(ns, name))}}})
}

func (e *testEnv) commit(op *storev1.RequestOp) int64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), waitLimit)
	defer cancel()
	resp, err := e.kv.Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{op}})
	if err != nil {
		e.t.Fatal(err)
	}
	rev := resp.GetHeader().GetRevision()
	if err := e.cache.WaitForRev(ctx, rev); err != nil {
		e.t.Fatalf("the cache did not reach revision %d: %v", rev, err)
	}
	return rev
}

// eventually waits until cond holds, failing the test with what after
// waitLimit.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(waitLimit); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after %v", what, waitLimit)
		}
	}
}

// registered returns the server's registered watch of id (registered:
// its subscription is open and its deadline scheduled), once there is
// exactly one.
func (e *testEnv) registered(id int64) *watch {
	e.t.Helper()
	var found *watch
	eventually(e.t, fmt.Sprintf("registered watch %d", id), func() bool {
		e.srv.deadlines.mu.Lock()
		defer e.srv.deadlines.mu.Unlock()
		found = nil
		n := 0
		for _, w := range e.srv.deadlines.h {
			if w.id == id {
				found = w
				n++
			}
		}
		return n == 1
	})
	return found
}

// waitingForCredit reports whether w's setup is out of credit with a
// channel to wait on: it cannot send before a grant.
func waitingForCredit(w *watch) bool {
	w.creditMu.Lock()
	defer w.creditMu.Unlock()
	return w.creditCh != nil && w.credit.Load() == 0
}

// frame is one JSON watch frame, summed up as "TYPE ns/name" for an
// object, "BOOKMARK" (with " end" when it ends the initial events) and
// "ERROR code reason".
type frame struct {
	desc string
	rv   int64 // the object's resourceVersion
}

// frames decodes the JSON watch frames of a message: one a line.
func frames(t *testing.T, data []byte) []frame {
	t.Helper()
	var out []frame
	for line := range bytes.Lines(data) {
		var ev metav1.WatchEvent
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatalf("bad frame %q: %v", line, err)
		}
		out = append(out, decodeFrame(t, ev))
	}
	return out
}

func decodeFrame(t *testing.T, ev metav1.WatchEvent) frame {
	t.Helper()
	if ev.Type == "ERROR" {
		var st metav1.Status
		if err := json.Unmarshal(ev.Object.Raw, &st); err != nil {
			t.Fatal(err)
		}
		return frame{desc: fmt.Sprintf("ERROR %d %s", st.Code, st.Reason)}
	}
	var obj metav1.PartialObjectMetadata
	if err := json.Unmarshal(ev.Object.Raw, &obj); err != nil {
		t.Fatal(err)
	}
	f := frame{desc: ev.Type + " " + obj.Namespace + "/" + obj.Name}
	if ev.Type == "BOOKMARK" {
		f.desc = "BOOKMARK"
		if obj.Annotations[cache.InitialEventsEndAnnotation] == "true" {
			f.desc += " end"
		}
	}
	rv, err := strconv.ParseInt(obj.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatalf("frame %s: resourceVersion %q", f.desc, obj.ResourceVersion)
	}
	f.rv = rv
	return f
}

// descs are the descriptions of fs.
func descs(fs []frame) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.desc
	}
	return out
}

// manyStream is a WatchMany stream of the test's client, read as the
// test asks for the messages of one watch: those of the others are kept
// until asked for. The stream is bounded by streamLimit.
type manyStream struct {
	t       *testing.T
	st      watchv1.WatchService_WatchManyClient
	pending map[int64][]*watchv1.WatchManyResponse // received, not read yet
	err     error                                  // how the stream ended (io.EOF: OK)
}

// streamLimit bounds a test's stream: a message that never comes fails
// the test by then.
const streamLimit = 3 * waitLimit

func (e *testEnv) watchMany() *manyStream {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), streamLimit)
	e.t.Cleanup(cancel)
	st, err := e.client.WatchMany(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return &manyStream{t: e.t, st: st, pending: map[int64][]*watchv1.WatchManyResponse{}}
}

// receive reads one message into pending, or records the end of the
// stream.
func (m *manyStream) receive() {
	resp, err := m.st.Recv()
	if err != nil {
		m.err = err
		return
	}
	m.pending[resp.GetId()] = append(m.pending[resp.GetId()], resp)
}

func (m *manyStream) send(req *watchv1.WatchManyRequest) {
	m.t.Helper()
	if err := m.st.Send(req); err != nil {
		m.t.Fatal(err)
	}
}

// open opens watch id in namespace ns with a credit window (0: none);
// req may set the rest (ConfigMaps unless it names a resource).
func (m *manyStream) open(id, window int64, ns string, req *watchv1.WatchRequest) {
	m.t.Helper()
	if req.Resource == nil {
		req.Resource = configMaps
	}
	req.Namespace = ns
	m.send(&watchv1.WatchManyRequest{Op: &watchv1.WatchManyRequest_Open{Open: &watchv1.WatchOpen{Id: id, Window: window, Request: req}}})
}

func (m *manyStream) credit(id, n int64) {
	m.t.Helper()
	m.send(&watchv1.WatchManyRequest{Op: &watchv1.WatchManyRequest_Credit{Credit: &watchv1.WatchCredit{Id: id, Messages: n}}})
}

func (m *manyStream) cancelWatch(id int64) {
	m.t.Helper()
	m.send(&watchv1.WatchManyRequest{Op: &watchv1.WatchManyRequest_Cancel{Cancel: id}})
}

// nextOf returns the next message of watch id.
func (m *manyStream) nextOf(id int64) *watchv1.WatchManyResponse {
	m.t.Helper()
	for len(m.pending[id]) == 0 {
		if m.err != nil {
			m.t.Fatalf("the stream ended (%v) before a message of watch %d", m.err, id)
		}
		m.receive()
	}
	resp := m.pending[id][0]
	m.pending[id] = m.pending[id][1:]
	return resp
}

// first reads the first message of watch id, which must be empty: the
// watch is established.
func (m *manyStream) first(id int64) {
	m.t.Helper()
	if resp := m.nextOf(id); resp.GetEnd() || len(resp.GetResponse().GetFrames()) != 0 {
		m.t.Fatalf("first message of watch %d: %v, want it empty", id, resp)
	}
}

// framesOf reads the next n messages of watch id, which must not end it,
// and returns their frames.
func (m *manyStream) framesOf(id int64, n int) []string {
	m.t.Helper()
	var out []frame
	for range n {
		resp := m.nextOf(id)
		if resp.GetEnd() {
			m.t.Fatalf("watch %d ended (status %x) after %v", id, resp.GetStatus(), descs(out))
		}
		out = append(out, frames(m.t, resp.GetResponse().GetFrames())...)
	}
	return descs(out)
}

// untilEnd reads the messages of watch id up to its end and returns their
// frames and the end's status (nil: OK).
func (m *manyStream) untilEnd(id int64) ([]string, *status.Status) {
	m.t.Helper()
	var out []frame
	for {
		resp := m.nextOf(id)
		out = append(out, frames(m.t, resp.GetResponse().GetFrames())...)
		if !resp.GetEnd() {
			continue
		}
		if len(resp.GetStatus()) == 0 {
			return descs(out), nil
		}
		var sp spb.Status
		if err := proto.Unmarshal(resp.GetStatus(), &sp); err != nil {
			m.t.Fatal(err)
		}
		return descs(out), status.FromProto(&sp)
	}
}

// ended reads the stream to its end and returns its error (nil: OK).
func (m *manyStream) ended() error {
	for m.err == nil {
		m.receive()
	}
	if errors.Is(m.err, io.EOF) {
		return nil
	}
	return m.err
}
