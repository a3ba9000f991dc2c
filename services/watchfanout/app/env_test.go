package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meridian-cp/meridian/lib/grpcclient"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	storeapp "github.com/meridian-cp/meridian/services/store/app"
	"github.com/meridian-cp/meridian/services/watchfanout/app"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// env is a real single-node store (raft + pebble + gRPC on loopback) and
// a watchfanout replica in front of it.
type env struct {
	t        *testing.T
	storeLis string
	store    *storeapp.App
	kv       storev1.KVServiceClient
	codec    *codec.Codec
	cms      *registry.Resource

	mu      sync.Mutex // guards watch during restarts
	fanout  *app.App
	reg     *prometheus.Registry
	addr    string
	watch   watchv1.WatchServiceClient
	cfg     app.Config
	served  chan error
	clients []*grpc.ClientConn
}

func newEnv(t *testing.T, cfg app.Config) *env {
	t.Helper()
	ctx := t.Context()
	st, err := storeapp.New(ctx, storeapp.Config{ID: "store-0", DataDir: t.TempDir(), Bootstrap: true, Logger: quietLogger(), ProgressInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go st.Serve(lis)
	t.Cleanup(func() { st.Close() })
	conn, err := grpcclient.Dial(lis.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(registry.Core()...)
	cms, _ := reg.Lookup(corev1.SchemeGroupVersion.WithResource("configmaps"))
	e := &env{t: t, storeLis: lis.Addr().String(), store: st, kv: storev1.NewKVServiceClient(conn), codec: c, cms: cms, cfg: cfg}
	e.startFanout("127.0.0.1:0")
	t.Cleanup(e.stopFanout)
	return e
}

// startFanout starts a watchfanout replica on addr and waits until it has
// synced.
func (e *env) startFanout(addr string) {
	e.t.Helper()
	cfg := e.cfg
	cfg.StoreAddress = e.storeLis
	e.reg = prometheus.NewRegistry()
	cfg.Registerer = e.reg
	cfg.Logger = quietLogger()
	a, err := app.New(e.t.Context(), cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	var lis net.Listener
	for i := 0; ; i++ {
		if lis, err = net.Listen("tcp", addr); err == nil || i > 50 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	e.served = make(chan error, 1)
	go func() { e.served <- a.Serve(lis) }()
	select {
	case <-a.Synced():
	case <-time.After(20 * time.Second):
		e.t.Fatal("watchfanout did not sync")
	}
	conn, err := grpcclient.Dial(lis.Addr().String(), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.clients = append(e.clients, conn)
	e.mu.Lock()
	e.fanout, e.addr, e.watch = a, lis.Addr().String(), watchv1.NewWatchServiceClient(conn)
	e.mu.Unlock()
}

func (e *env) stopFanout() {
	if e.fanout == nil {
		return
	}
	e.fanout.Close()
	if err := <-e.served; err != nil {
		e.t.Errorf("Serve: %v", err)
	}
	for _, c := range e.clients {
		c.Close()
	}
	e.fanout, e.clients = nil, nil
}

func configMap(ns, name string, labels map[string]string, data string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Data: map[string]string{"d": data}}
}

// put writes cm as the gateway does and returns the revision.
func (e *env) put(ctx context.Context, cm *corev1.ConfigMap) (int64, error) {
	val, err := e.codec.EncodeStorage(cm)
	if err != nil {
		return 0, err
	}
	resp, err := e.kv.Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{Key: []byte(e.cms.Key(cm.Namespace, cm.Name)), Value: val}}}}})
	if err != nil {
		return 0, err
	}
	return resp.GetHeader().GetRevision(), nil
}

func (e *env) mustPut(cm *corev1.ConfigMap) int64 {
	e.t.Helper()
	rev, err := e.put(e.t.Context(), cm)
	if err != nil {
		e.t.Fatal(err)
	}
	return rev
}

func (e *env) del(ctx context.Context, ns, name string) (int64, error) {
	resp, err := e.kv.Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestDeleteRange{RequestDeleteRange: &storev1.DeleteRangeRequest{Key: []byte(e.cms.Key(ns, name))}}}}})
	if err != nil {
		return 0, err
	}
	return resp.GetHeader().GetRevision(), nil
}

var cmResource = &watchv1.Resource{Version: "v1", Resource: "configmaps"}

// event is a decoded JSON watch frame.
type event struct {
	Type   string `json:"type"`
	Object struct {
		Kind     string `json:"kind"`
		Code     int    `json:"code"`
		Reason   string `json:"reason"`
		Metadata struct {
			Name            string            `json:"name"`
			Namespace       string            `json:"namespace"`
			ResourceVersion string            `json:"resourceVersion"`
			Labels          map[string]string `json:"labels"`
			Annotations     map[string]string `json:"annotations"`
		} `json:"metadata"`
		Data map[string]string `json:"data"`
	} `json:"object"`
}

func (ev event) rv() int64 {
	var n int64
	fmt.Sscan(ev.Object.Metadata.ResourceVersion, &n)
	return n
}

// parseFrames decodes JSON watch frames.
func parseFrames(t testing.TB, b []byte) []event {
	var out []event
	dec := json.NewDecoder(bytes.NewReader(b))
	for {
		var ev event
		if err := dec.Decode(&ev); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Errorf("bad frame %q: %v", b, err)
			return out
		}
		out = append(out, ev)
	}
}

// stream is an open watch whose events arrive on a channel; the channel
// closes when the stream ends (err says how).
type stream struct {
	events chan event
	err    error
	cancel context.CancelFunc
}

func (e *env) openWatch(ctx context.Context, req *watchv1.WatchRequest) (*stream, error) {
	ctx, cancel := context.WithCancel(ctx)
	e.mu.Lock()
	wc := e.watch
	e.mu.Unlock()
	cl, err := wc.Watch(ctx, req)
	if err != nil {
		cancel()
		return nil, err
	}
	first, err := cl.Recv()
	if err != nil {
		cancel()
		return nil, err
	}
	if len(first.GetFrames()) != 0 {
		cancel()
		return nil, fmt.Errorf("first message not empty: %q", first.GetFrames())
	}
	s := &stream{events: make(chan event, 100000), cancel: cancel}
	go func() {
		defer close(s.events)
		for {
			resp, err := cl.Recv()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					s.err = err
				}
				return
			}
			for _, ev := range parseFrames(e.t, resp.GetFrames()) {
				s.events <- ev
			}
		}
	}()
	return s, nil
}

func (e *env) mustWatch(req *watchv1.WatchRequest) *stream {
	e.t.Helper()
	s, err := e.openWatch(e.t.Context(), req)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(s.cancel)
	return s
}

// next returns the next event or fails after a while.
func (s *stream) next(t testing.TB) event {
	t.Helper()
	select {
	case ev, ok := <-s.events:
		if !ok {
			t.Fatalf("stream ended: %v", s.err)
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return event{}
}

func (s *stream) expect(t testing.TB, typ, name string) event {
	t.Helper()
	ev := s.next(t)
	if ev.Type != typ || (name != "" && ev.Object.Metadata.Name != name) {
		t.Fatalf("got %s %s (rv %s), want %s %s", ev.Type, ev.Object.Metadata.Name, ev.Object.Metadata.ResourceVersion, typ, name)
	}
	return ev
}
