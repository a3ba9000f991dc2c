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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	"github.com/meridian-cp/meridian/lib/grpcclient"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/watchmux"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	storeapp "github.com/meridian-cp/meridian/services/store/app"
	storeclient "github.com/meridian-cp/meridian/services/store/client"
	"github.com/meridian-cp/meridian/services/store/storetest"
	"github.com/meridian-cp/meridian/services/watchfanout/app"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// env is a real store (raft + pebble + gRPC on loopback: one member, or a
// cluster of voters) and a watchfanout replica in front of it.
type env struct {
	t      *testing.T
	stores []*storeMember
	sc     *storeclient.Client // over every member; follows the leader
	kv     storev1.KVServiceClient
	codec  *codec.Codec
	cms    *registry.Resource

	// viaMux opens watches through a client.Mux (WatchMany) instead of
	// Watch; muxes holds one per replica client.
	viaMux bool
	muxes  map[watchv1.WatchServiceClient]*watchmux.Mux

	mu      sync.Mutex // guards watch during restarts
	fanout  *app.App
	reg     *prometheus.Registry
	addr    string
	watch   watchv1.WatchServiceClient
	cfg     app.Config
	served  chan error
	clients []*grpc.ClientConn
}

// storeMember is one in-process store member serving gRPC on loopback.
type storeMember struct {
	id, addr string
	reg      *prometheus.Registry // the member's metrics
	app      *storeapp.App        // nil once stopped
	member   *storetest.Member
	cfg      storeapp.Config // a cluster member's, to restart it
}

// watchers is how many watches the member serves.
func (m *storeMember) watchers(t *testing.T) float64 { return m.gauge(t, "meridian_store_watchers") }

// gauge is the value of one of the member's gauges (0 when absent).
func (m *storeMember) gauge(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

// stop closes the member; safe to call twice.
func (m *storeMember) stop() {
	m.member.Stop()
	m.app = nil
}

// restart starts a stopped cluster member again from its data, on its
// address; it returns once the member serves (it may still be catching
// up with the leader).
func (m *storeMember) restart(t *testing.T) {
	t.Helper()
	if m.cfg.DataDir == "" {
		t.Fatal("only a cluster member restarts")
	}
	var lis net.Listener
	var err error
	for i := 0; ; i++ {
		if lis, err = net.Listen("tcp", m.addr); err == nil || i > 50 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	m.reg = prometheus.NewRegistry()
	m.cfg.Registerer = m.reg
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	st, err := storeapp.New(ctx, m.cfg)
	if err != nil {
		lis.Close()
		t.Fatalf("restart %s: %v", m.id, err)
	}
	m.app, m.member = st, storetest.Serve(t, st, lis)
}

// newEnv starts a single-node store and a watchfanout replica; storeOpts
// go to the store's gRPC server (e.g. an interceptor that injects delays).
func newEnv(t *testing.T, cfg app.Config, storeOpts ...grpc.ServerOption) *env {
	t.Helper()
	reg := prometheus.NewRegistry()
	sm := storetest.Start(t, storeapp.Config{ID: "store-0", Logger: quietLogger(),
		ProgressInterval: 200 * time.Millisecond, Registerer: reg, GRPCServerOptions: storeOpts})
	m := &storeMember{id: "store-0", addr: sm.Addr, reg: reg, app: sm.App, member: sm}
	t.Cleanup(m.stop)
	return startEnv(t, cfg, []*storeMember{m})
}

// newClusterEnv starts a store of n voters (plaintext raft and gRPC on
// loopback, fast failure detection) and a watchfanout replica configured
// with every member's address.
func newClusterEnv(t *testing.T, cfg app.Config, n int) *env {
	t.Helper()
	peers := daemontest.FreeAddrs(t, n)
	var initial []storeapp.Member
	var cfgs []storeapp.Config
	var listeners []net.Listener // the members' gRPC listeners, open from the start
	for i := range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lis.Close() })
		listeners = append(listeners, lis)
		c := storeapp.Config{
			ID: fmt.Sprintf("s%d", i), DataDir: t.TempDir(), Bootstrap: true, CompactionRetention: -1,
			PeerAddress: peers[i], ClientAddress: lis.Addr().String(), Logger: quietLogger(),
			HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond,
			ProgressInterval: 200 * time.Millisecond, Registerer: prometheus.NewRegistry(),
		}
		initial = append(initial, storeapp.Member{ID: c.ID, PeerAddress: c.PeerAddress, ClientAddress: c.ClientAddress})
		cfgs = append(cfgs, c)
	}
	members := make([]*storeMember, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range cfgs {
		cfgs[i].InitialCluster = initial
		wg.Add(1)
		go func() { // members wait for each other at start
			defer wg.Done()
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			st, err := storeapp.New(ctx, cfgs[i])
			if err != nil {
				errs[i] = err
				return
			}
			members[i] = &storeMember{id: cfgs[i].ID, addr: cfgs[i].ClientAddress, reg: cfgs[i].Registerer.(*prometheus.Registry), app: st,
				member: storetest.Serve(t, st, listeners[i]), cfg: cfgs[i]}
		}()
	}
	wg.Wait()
	for _, m := range members {
		if m != nil {
			t.Cleanup(m.stop)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("start the store cluster: %v", err)
	}
	return startEnv(t, cfg, members)
}

// startEnv connects to the store's members and starts a watchfanout
// replica in front of them.
func startEnv(t *testing.T, cfg app.Config, members []*storeMember) *env {
	t.Helper()
	var addrs []string
	for _, m := range members {
		addrs = append(addrs, m.addr)
	}
	sc, err := storeclient.Dial(addrs, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Close() })
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(registry.Core()...)
	cms, _ := reg.Lookup(corev1.SchemeGroupVersion.WithResource("configmaps"))
	cfg.StoreAddress = strings.Join(addrs, ",")
	e := &env{t: t, stores: members, sc: sc, kv: sc.KV(), codec: c, cms: cms, cfg: cfg}
	e.startFanout("127.0.0.1:0")
	t.Cleanup(e.stopFanout)
	return e
}

// startFanout starts a watchfanout replica on addr and waits until it has
// synced.
func (e *env) startFanout(addr string) {
	e.t.Helper()
	cfg := e.cfg
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
	var cl grpc.ServerStreamingClient[watchv1.WatchResponse]
	var err error
	if e.viaMux {
		if e.muxes == nil {
			e.muxes = map[watchv1.WatchServiceClient]*watchmux.Mux{}
		}
		m := e.muxes[wc]
		if m == nil {
			m = watchmux.New(wc, watchmux.Options{})
			e.muxes[wc] = m
		}
		e.mu.Unlock()
		cl, err = m.Watch(ctx, req)
	} else {
		e.mu.Unlock()
		cl, err = wc.Watch(ctx, req)
	}
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
