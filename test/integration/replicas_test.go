package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/pki/pkitest"
	"github.com/meridian-cp/meridian/lib/polltest"
	"github.com/meridian-cp/meridian/lib/telemetry/telemetrytest"
	gateway "github.com/meridian-cp/meridian/services/apigateway/app"
	store "github.com/meridian-cp/meridian/services/store/app"
	"github.com/meridian-cp/meridian/services/store/storetest"
	watchfanout "github.com/meridian-cp/meridian/services/watchfanout/app"
)

// replica is one watchfanout replica serving on a loopback address, with
// its own metrics registry (to tell which replica served what).
type replica struct {
	t       *testing.T
	name    string
	addr    string
	store   string
	history int // HistoryMaxEvents; 0 for the default
	reg     *prometheus.Registry
	app     *watchfanout.App
	served  chan error
	// proxy, when set, is where the gateway reaches the replica.
	proxy *proxy
}

// start starts the replica on its address (a free port the first time,
// the same one on a restart) and waits until its cache has synced.
func (r *replica) start() {
	r.t.Helper()
	r.reg = prometheus.NewRegistry()
	a, err := watchfanout.New(r.t.Context(), watchfanout.Config{
		StoreAddress: r.store, Registry: registry.New(registry.Standard()...),
		Registerer: r.reg, Logger: slog.New(slog.DiscardHandler), HistoryMaxEvents: r.history,
	})
	if err != nil {
		r.t.Fatal(err)
	}
	addr := r.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var lis net.Listener
	deadline := time.Now().Add(10 * time.Second)
	for { // the old listener's port may take a moment to free up
		if lis, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		a.Close()
		r.t.Fatal(err)
	}
	r.addr, r.app, r.served = lis.Addr().String(), a, make(chan error, 1)
	go func() { r.served <- a.Serve(lis) }()
	select {
	case <-a.Synced():
	case <-time.After(20 * time.Second):
		r.t.Fatalf("replica %s did not sync", r.name)
	}
}

// stop stops the replica; safe to call twice.
func (r *replica) stop() {
	if r.app == nil {
		return
	}
	r.app.Close()
	if err := <-r.served; err != nil {
		r.t.Errorf("replica %s: Serve: %v", r.name, err)
	}
	r.app = nil
}

// metric sums the values of the series of the counter or gauge name whose
// labels include match.
func (r *replica) metric(name string, match map[string]string) float64 {
	r.t.Helper()
	return telemetrytest.Sum(r.t, r.reg, name, match)
}

// watchers is how many configmap watches the replica serves.
func (r *replica) watchers() float64 {
	if r.app == nil {
		return 0
	}
	return r.metric("watchfanout_watchers", map[string]string{"resource": "configmaps"})
}

// lists is how many lists the replica answered OK, whole (List) or
// streamed (StreamList).
func (r *replica) lists() float64 {
	return r.metric("grpc_server_handled_total", map[string]string{"grpc_method": "List", "grpc_code": "OK"}) + r.streamLists()
}

// streamLists is how many StreamList calls the replica answered OK.
func (r *replica) streamLists() float64 {
	return r.metric("grpc_server_handled_total", map[string]string{"grpc_method": "StreamList", "grpc_code": "OK"})
}

// replicaEnv is a store, two watchfanout replicas and a gateway that
// spreads watches and cached reads over them, each on its own gRPC server
// on loopback (plaintext between them; HTTPS with client certificates at
// the gateway).
type replicaEnv struct {
	replicas [2]*replica
	client   kubernetes.Interface
	// config is client's configuration; gateway holds the gateway's
	// metrics.
	config  *rest.Config
	gateway *prometheus.Registry
	// storeAddr is the store's address (plaintext).
	storeAddr string
}

// replicaSetup tunes a replicaEnv.
type replicaSetup struct {
	// proxied puts a TCP proxy in front of each replica, which the
	// gateway dials: cutting it is the replica dying.
	proxied bool
	// history caps each replica's history (HistoryMaxEvents); 0 for the
	// default.
	history int
}

func newReplicaEnv(t *testing.T, tune ...func(*replicaSetup)) *replicaEnv {
	t.Helper()
	var setup replicaSetup
	for _, f := range tune {
		f(&setup)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	quiet := slog.New(slog.DiscardHandler)

	storeAddr := storetest.Start(t, store.Config{ID: "store-0", Logger: quiet}).Addr

	e := &replicaEnv{gateway: prometheus.NewRegistry(), storeAddr: storeAddr}
	var dial []string
	for i := range e.replicas {
		r := &replica{t: t, name: fmt.Sprintf("r%d", i), store: storeAddr, history: setup.history}
		r.start()
		t.Cleanup(r.stop)
		e.replicas[i] = r
		if setup.proxied {
			r.proxy = newProxy(t, r.addr)
			dial = append(dial, r.proxy.addr())
		} else {
			dial = append(dial, r.addr)
		}
	}

	ca := pkitest.NewCA(t, "test-ca")
	serving := pkitest.IssueTLS(t, ca, pkitest.LoopbackServer("meridian-apiserver"))
	admin := pkitest.Issue(t, ca, pki.CertSpec{CommonName: "admin", Organizations: []string{"system:masters"}, Client: true})
	gw, err := gateway.New(ctx, gateway.Config{
		StoreAddress:         storeAddr,
		WatchFanoutAddresses: dial,
		Registry:             registry.New(registry.Standard()...),
		ServingTLS:           pki.ServerTLS(serving, nil, tls.NoClientCert),
		ClientCAs:            ca.Pool(),
		Registerer:           e.gateway,
		Logger:               quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	apiAddr := daemontest.Serve(t, gw).Addr

	rc := &rest.Config{
		Host:            "https://" + apiAddr,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca.CertPEM(), CertData: admin.CertPEM, KeyData: admin.KeyPEM},
		QPS:             2000, Burst: 2000,
	}
	if e.client, err = kubernetes.NewForConfig(rc); err != nil {
		t.Fatal(err)
	}
	e.config = rc
	return e
}

// seen is one event a watcher received.
type seen struct {
	rv   string
	name string
	typ  watch.EventType
}

// TestWatchMovesToHealthyReplica: two watchfanout replicas behind the
// gateway, writes flowing. A client watches configmaps through the gateway
// and re-watches from its last resourceVersion whenever its watch ends (as
// client-go does; the gateway resumes the watch itself, see
// failover_test.go). The replica serving the watch stops: the watch is
// served by the other replica, and cached lists (resourceVersion=0) keep
// being served by it. The stopped replica restarts on its address and the other one
// stops: the watch moves back. Across both moves the client receives every
// write exactly once, in order.
func TestWatchMovesToHealthyReplica(t *testing.T) {
	e := newReplicaEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	cms := e.client.CoreV1().ConfigMaps("default")
	seed, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "seed"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The watcher.
	var mu sync.Mutex
	var got []seen
	last := seed.ResourceVersion
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for watchCtx.Err() == nil {
			mu.Lock()
			from := last
			mu.Unlock()
			w, err := cms.Watch(watchCtx, metav1.ListOptions{ResourceVersion: from})
			if err != nil {
				if watchCtx.Err() == nil {
					t.Logf("watch from %s: %v", from, err)
				}
				select {
				case <-watchCtx.Done():
				case <-time.After(50 * time.Millisecond):
				}
				continue
			}
			n := 0
			for ev := range w.ResultChan() {
				n++
				cm, ok := ev.Object.(*corev1.ConfigMap)
				if !ok {
					if watchCtx.Err() == nil { // not the end of the test
						t.Errorf("watch from %s: %s %+v", from, ev.Type, ev.Object)
					}
					break
				}
				mu.Lock()
				got = append(got, seen{rv: cm.ResourceVersion, name: cm.Name, typ: ev.Type})
				last = cm.ResourceVersion
				mu.Unlock()
			}
			w.Stop()
			if watchCtx.Err() == nil {
				// Where each watch ended helps to read a failure.
				t.Logf("watch from %s ended after %d events", from, n)
			}
		}
	}()

	// The writer: one at a time, so acknowledged order is revision order.
	// writeCtx only tells it to stop between writes: a write cancelled in
	// flight may still commit, unacknowledged, and the watcher would see
	// an event past the last acknowledged one.
	var wmu sync.Mutex
	var want []seen
	writeCtx, stopWrites := context.WithCancel(ctx)
	defer stopWrites()
	writeDone := make(chan error, 1)
	go func() {
		for i := 0; writeCtx.Err() == nil; i++ {
			name := fmt.Sprintf("cm-%d", i%10)
			var cm *corev1.ConfigMap
			var err error
			typ := watch.Added
			if i < 10 {
				cm, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"i": strconv.Itoa(i)}}, metav1.CreateOptions{})
			} else {
				typ = watch.Modified
				cm, err = cms.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"i": strconv.Itoa(i)}}, metav1.UpdateOptions{})
			}
			if err != nil {
				writeDone <- fmt.Errorf("write %d: %w", i, err)
				return
			}
			wmu.Lock()
			want = append(want, seen{rv: cm.ResourceVersion, name: name, typ: typ})
			wmu.Unlock()
			select {
			case <-writeCtx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
		writeDone <- nil
	}()
	// awaitWrites waits for n more acknowledged writes.
	awaitWrites := func(n int) {
		t.Helper()
		wmu.Lock()
		target := len(want) + n
		wmu.Unlock()
		waitFor(t, fmt.Sprintf("%d more writes", n), func() bool {
			wmu.Lock()
			defer wmu.Unlock()
			return len(want) >= target
		})
	}

	// On failure, what each replica did helps to tell where events stopped.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		mu.Lock()
		t.Logf("the watcher is at %s", last)
		mu.Unlock()
		for _, r := range e.replicas {
			if r.app == nil {
				t.Logf("%s: stopped", r.name)
				continue
			}
			cm := map[string]string{"resource": "configmaps"}
			t.Logf("%s: revision %v, watchers %v, events received %v, queued %v, watchers ended %v", r.name,
				r.metric("watchfanout_cache_revision", cm), r.watchers(),
				r.metric("apiserver_watch_cache_events_received_total", cm), r.metric("apiserver_watch_events_total", nil),
				r.metric("watchfanout_terminated_watchers_total", nil))
		}
	})

	from, to := e.replicas[0], e.replicas[1]
	for _, move := range []string{"stop", "restart and stop the other"} {
		awaitWrites(50)
		// Which replica serves the watch.
		waitFor(t, "the watch on a replica", func() bool { return from.watchers()+to.watchers() > 0 })
		if from.watchers() == 0 {
			from, to = to, from
		}
		if to.watchers() != 0 {
			t.Fatalf("%s: both replicas serve a configmap watch", move)
		}
		t.Logf("%s: the watch is on %s; stopping it", move, from.name)
		from.stop()

		// The re-watch is served by the other replica.
		waitFor(t, "the re-watch on "+to.name, func() bool { return to.watchers() > 0 })
		awaitWrites(50)
		if to.watchers() == 0 {
			t.Fatalf("%s: the watch left %s", move, to.name)
		}
		// Cached lists are served by the other replica too.
		before := to.lists()
		for i := range 10 {
			l, err := cms.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
			if err != nil {
				t.Fatalf("%s: cached list %d: %v", move, i, err)
			}
			if len(l.Items) < 10 {
				t.Fatalf("%s: cached list %d has %d items", move, i, len(l.Items))
			}
		}
		if n := to.lists() - before; n < 10 {
			t.Fatalf("%s: %s served %v of 10 cached lists", move, to.name, n)
		}

		// The stopped replica comes back on its address, and the gateway
		// reaches it again before the other one goes away.
		from.start()
		before = from.lists()
		waitFor(t, "a cached list served by the restarted "+from.name, func() bool {
			_, err := cms.List(ctx, metav1.ListOptions{ResourceVersion: "0"})
			return err == nil && from.lists() > before
		})
	}

	awaitWrites(50)
	stopWrites()
	if err := <-writeDone; err != nil {
		t.Fatal(err)
	}
	final := want[len(want)-1].rv
	waitFor(t, "the watcher at the last write "+final, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return last == final
	})
	stopWatch()
	<-watchDone

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d writes, each watched once", len(want))
	for i := range max(len(got), len(want)) {
		if i >= len(got) || i >= len(want) || got[i] != want[i] {
			t.Fatalf("%d events, want %d; first difference at %d: got %v, want %v", len(got), len(want), i, seenAt(got, i), seenAt(want, i))
		}
	}
}

func seenAt(s []seen, i int) string {
	if i < len(s) {
		return fmt.Sprint(s[i])
	}
	return "none"
}

// waitFor polls cond, failing the test after 30s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	polltest.Until(t, 30*time.Second, what, cond)
}
