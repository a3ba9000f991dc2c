package integration

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/meridian-cp/meridian/lib/telemetry/telemetrytest"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// These tests kill the watchfanout replica serving a client's watch, by
// cutting it off (it dies: its connections are reset and nothing answers
// at its address) or stopping it (it drains), and check that the client's
// one HTTP watch goes on: every event written before, during and after
// the kill arrives exactly once, in order, with no ERROR, and the
// response stays open. The gateway resumes the watch on the other replica,
// or on the store, from the last resourceVersion it delivered.

// proxy forwards TCP connections to a replica. kill makes the replica
// unreachable at once, as if it died: every connection is reset and
// nothing listens at the proxy's address any more.
type proxy struct {
	lis net.Listener
	to  string

	mu     sync.Mutex
	conns  []net.Conn
	killed bool
}

func newProxy(t *testing.T, to string) *proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{lis: lis, to: to}
	go p.serve()
	t.Cleanup(p.kill)
	return p
}

func (p *proxy) addr() string { return p.lis.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		go p.forward(c)
	}
}

func (p *proxy) forward(c net.Conn) {
	u, err := net.Dial("tcp", p.to)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.killed {
		p.mu.Unlock()
		c.Close()
		u.Close()
		return
	}
	p.conns = append(p.conns, c, u)
	p.mu.Unlock()
	go func() { _, _ = io.Copy(u, c); u.Close() }()
	_, _ = io.Copy(c, u)
	c.Close()
}

// kill resets every connection and stops listening; safe to call twice.
func (p *proxy) kill() {
	p.lis.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.killed = true
	for _, c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST, as from a host that is gone
		}
		c.Close()
	}
	p.conns = nil
}

// How a replica is taken away.
const (
	dies   = "dies"   // its proxy is cut
	drains = "drains" // it shuts down gracefully
)

// kill takes the replica away as how says.
func (r *replica) kill(how string) {
	r.t.Helper()
	if how == dies {
		r.proxy.kill()
		return
	}
	r.stop()
}

// serving returns the replica that serves the configmap watch, waiting
// until exactly one live replica does (a watch that moved may still be
// counted a moment by the replica it left).
func (e *replicaEnv) serving(t *testing.T) *replica {
	t.Helper()
	var r *replica
	waitFor(t, "one replica serving the watch", func() bool {
		r = nil
		for _, c := range e.replicas {
			if c.app == nil || (c.proxy != nil && c.proxy.isKilled()) || c.watchers() == 0 {
				continue
			}
			if r != nil {
				return false
			}
			r = c
		}
		return r != nil
	})
	return r
}

func (p *proxy) isKilled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killed
}

// resumes is how many watches the gateway moved to where (replica, store,
// expired).
func (e *replicaEnv) resumes(t *testing.T, to string) float64 {
	return telemetrytest.Sum(t, e.gateway, "meridian_apigateway_watch_resumes_total", map[string]string{"to": to})
}

// writer creates configmaps one at a time (so that acknowledged order is
// revision order), each with labels, until stopped.
type writer struct {
	mu   sync.Mutex
	want []seen
	stop context.CancelFunc
	done chan error
}

func startWriter(ctx context.Context, e *replicaEnv, prefix string, labels map[string]string) *writer {
	cms := e.client.CoreV1().ConfigMaps("default")
	writeCtx, stop := context.WithCancel(ctx)
	w := &writer{stop: stop, done: make(chan error, 1)}
	go func() {
		// writeCtx only says when to stop between writes: a write
		// cancelled in flight may still commit, unacknowledged.
		for i := 0; writeCtx.Err() == nil; i++ {
			name := fmt.Sprintf("%s-%d", prefix, i)
			cm, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
			if err != nil {
				w.done <- fmt.Errorf("create %s: %w", name, err)
				return
			}
			w.mu.Lock()
			w.want = append(w.want, seen{rv: cm.ResourceVersion, name: name, typ: watch.Added})
			w.mu.Unlock()
			select {
			case <-writeCtx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
		w.done <- nil
	}()
	return w
}

// await waits for n more acknowledged writes.
func (w *writer) await(t *testing.T, n int) {
	t.Helper()
	w.mu.Lock()
	target := len(w.want) + n
	w.mu.Unlock()
	waitFor(t, fmt.Sprintf("%d more writes", n), func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.want) >= target
	})
}

// finish stops the writer and returns the writes.
func (w *writer) finish(t *testing.T) []seen {
	t.Helper()
	w.stop()
	if err := <-w.done; err != nil {
		t.Fatal(err)
	}
	return w.want
}

// rawWatch is one HTTP watch of configmaps in default, read frame by
// frame: its events (bookmarks other than the initial-events-end one are
// left out) and how its response ended.
type rawWatch struct {
	mu     sync.Mutex
	events []seen
	done   chan struct{} // closed when the response ended
	endErr error
}

// startRawWatch opens the watch with query, accepting contentType
// (application/json or application/vnd.kubernetes.protobuf;stream=watch).
func startRawWatch(t *testing.T, ctx context.Context, config *rest.Config, contentType string, query url.Values) *rawWatch {
	t.Helper()
	client, err := rest.HTTPClientFor(config)
	if err != nil {
		t.Fatal(err)
	}
	query.Set("watch", "1")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, config.Host+"/api/v1/namespaces/default/configmaps?"+query.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", contentType)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("watch: %s: %s", resp.Status, body)
	}
	w := &rawWatch{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer resp.Body.Close()
		next := jsonFrames(resp.Body)
		if strings.HasPrefix(contentType, "application/vnd.kubernetes.protobuf") {
			next = protobufFrames(resp.Body)
		}
		for {
			ev, err := next()
			if err == nil {
				err = w.add(ev)
			}
			if err != nil {
				w.mu.Lock()
				w.endErr = err
				w.mu.Unlock()
				return
			}
		}
	}()
	return w
}

// jsonFrames reads the WatchEvents of a JSON watch stream.
func jsonFrames(r io.Reader) func() (metav1.WatchEvent, error) {
	dec := json.NewDecoder(bufio.NewReader(r))
	return func() (metav1.WatchEvent, error) {
		var ev metav1.WatchEvent
		err := dec.Decode(&ev)
		return ev, err
	}
}

// protobufFrames reads the WatchEvents of a protobuf watch stream: each a
// 4-byte big-endian length and the WatchEvent.
func protobufFrames(r io.Reader) func() (metav1.WatchEvent, error) {
	br := bufio.NewReader(r)
	return func() (metav1.WatchEvent, error) {
		var ev metav1.WatchEvent
		var n [4]byte
		if _, err := io.ReadFull(br, n[:]); err != nil {
			return ev, err
		}
		buf := make([]byte, binary.BigEndian.Uint32(n[:]))
		if _, err := io.ReadFull(br, buf); err != nil {
			return ev, err
		}
		return ev, ev.Unmarshal(buf)
	}
}

// add records one event.
func (w *rawWatch) add(ev metav1.WatchEvent) error {
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(ev.Object.Raw, nil, nil)
	if err != nil {
		return fmt.Errorf("%s event: %w", ev.Type, err)
	}
	var s seen
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		s = seen{rv: o.ResourceVersion, name: o.Name, typ: watch.EventType(ev.Type)}
		if s.typ == watch.Bookmark {
			if o.Annotations[metav1.InitialEventsAnnotationKey] != "true" {
				return nil // a periodic bookmark
			}
			s.rv, s.name = "", "initial-events-end"
		}
	case *metav1.Status:
		s = seen{rv: fmt.Sprint(o.Code), name: string(o.Reason), typ: watch.EventType(ev.Type)}
	default:
		return fmt.Errorf("%s event of a %T", ev.Type, obj)
	}
	w.mu.Lock()
	w.events = append(w.events, s)
	w.mu.Unlock()
	return nil
}

// got returns the events so far.
func (w *rawWatch) got() []seen {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]seen(nil), w.events...)
}

// last is the last event, or none.
func (w *rawWatch) last() seen {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.events) == 0 {
		return seen{}
	}
	return w.events[len(w.events)-1]
}

// open fails the test if the response has ended.
func (w *rawWatch) open(t *testing.T, when string) {
	t.Helper()
	select {
	case <-w.done:
		w.mu.Lock()
		defer w.mu.Unlock()
		t.Fatalf("%s: the watch ended (%v) after %d events; last %v", when, w.endErr, len(w.events), seenAt(w.events, len(w.events)-1))
	default:
	}
}

// reach waits until the watch has delivered ev, failing the test at once
// if the response ends first.
func (w *rawWatch) reach(t *testing.T, ev seen) {
	t.Helper()
	waitFor(t, "the watch at the last write "+ev.rv, func() bool {
		w.open(t, "before the last write")
		return w.last() == ev
	})
}

// sameEvents fails the test unless got is want.
func sameEvents(t *testing.T, got, want []seen) {
	t.Helper()
	for i := range max(len(got), len(want)) {
		if i >= len(got) || i >= len(want) || got[i] != want[i] {
			t.Fatalf("%d events, want %d; first difference at %d: got %v, want %v", len(got), len(want), i, seenAt(got, i), seenAt(want, i))
		}
	}
}

// TestWatchFailoverRawHTTP: one HTTP watch through the gateway, in JSON
// and protobuf, from a resourceVersion, with legacy initial events
// (resourceVersion unset) and with sendInitialEvents; while configmaps
// are being written, the replica serving the watch dies or drains. The
// watch goes on on the other replica: every write arrives exactly once, in
// order, no ERROR, and the response stays open.
func TestWatchFailoverRawHTTP(t *testing.T) {
	const (
		jsonType  = "application/json"
		protoType = "application/vnd.kubernetes.protobuf;stream=watch"
	)
	for _, tc := range []struct {
		name        string
		contentType string
		start       string // "rv", "unset" (legacy initial events), "initial" (sendInitialEvents)
		kill        string
	}{
		{"json from a resourceVersion, replica dies", jsonType, "rv", dies},
		{"protobuf from a resourceVersion, replica drains", protoType, "rv", drains},
		{"json with initial events, replica dies", jsonType, "unset", dies},
		{"protobuf with sendInitialEvents, replica dies", protoType, "initial", dies},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newReplicaEnv(t, func(s *replicaSetup) { s.proxied = true })
			ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
			defer cancel()
			seed, err := e.client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "seed"}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			q := url.Values{}
			var want []seen
			switch tc.start {
			case "rv":
				q.Set("resourceVersion", seed.ResourceVersion)
			case "unset":
				want = []seen{{rv: seed.ResourceVersion, name: "seed", typ: watch.Added}}
			case "initial":
				q.Set("sendInitialEvents", "true")
				q.Set("resourceVersionMatch", "NotOlderThan")
				q.Set("allowWatchBookmarks", "true")
				want = []seen{{rv: seed.ResourceVersion, name: "seed", typ: watch.Added}, {name: "initial-events-end", typ: watch.Bookmark}}
			}
			w := startRawWatch(t, ctx, e.config, tc.contentType, q)
			if len(want) > 0 {
				waitFor(t, "the initial events", func() bool { return len(w.got()) >= len(want) })
			}
			wr := startWriter(ctx, e, "cm", nil)
			wr.await(t, 20)
			// Once a write has come through, the watch is where it stays.
			waitFor(t, "a write watched", func() bool { return len(w.got()) > len(want) })
			from := e.serving(t)
			t.Logf("the watch is on %s; it %s", from.name, tc.kill)
			from.kill(tc.kill)
			wr.await(t, 20)
			writes := wr.finish(t)
			final := writes[len(writes)-1]
			w.reach(t, final)
			sameEvents(t, w.got(), append(want, writes...))
			if n := e.resumes(t, "replica"); n != 1 {
				t.Fatalf("%v watches resumed on a replica, want 1", n)
			}
		})
	}
}

// TestWatchFailoverKubectl: `kubectl get -w` (a Table watch) through the
// gateway prints every configmap written before, during and after the
// death of the replica serving its watch, once each, in order, and keeps
// running.
func TestWatchFailoverKubectl(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not on PATH")
	}
	e := newReplicaEnv(t, func(s *replicaSetup) { s.proxied = true })
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	if _, err := e.client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "seed"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	kubectlCtx, stopKubectl := context.WithCancel(ctx)
	defer stopKubectl()
	cmd := exec.CommandContext(kubectlCtx, "kubectl", "--kubeconfig", writeKubeconfig(t, e.config), "-n", "default", "get", "configmaps", "--watch", "--output-watch-events", "--no-headers")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	var mu sync.Mutex
	var rows []string // "EVENT NAME" of each row printed
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) >= 2 {
				mu.Lock()
				rows = append(rows, f[0]+" "+f[1])
				mu.Unlock()
			}
		}
		exited <- cmd.Wait()
	}()
	printed := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), rows...)
	}
	waitFor(t, "kubectl to print the seed", func() bool { return len(printed()) > 0 })
	from := e.serving(t)

	wr := startWriter(ctx, e, "cm", nil)
	wr.await(t, 20)
	t.Logf("kubectl's watch is on %s; it dies", from.name)
	from.kill(dies)
	wr.await(t, 20)
	writes := wr.finish(t)
	want := []string{"ADDED seed"}
	for _, w := range writes {
		want = append(want, "ADDED "+w.name)
	}
	waitFor(t, "kubectl to print the last write", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("kubectl exited (%v) after printing %d rows; stderr: %s", err, len(printed()), stderr.String())
		default:
		}
		got := printed()
		return len(got) > 0 && got[len(got)-1] == want[len(want)-1]
	})
	got := printed()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("kubectl printed\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	select {
	case err := <-exited:
		t.Fatalf("kubectl exited (%v); stderr: %s", err, stderr.String())
	default:
	}
}

// writeKubeconfig writes a kubeconfig for config and returns its path.
func writeKubeconfig(t *testing.T, config *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["meridian"] = &clientcmdapi.Cluster{Server: config.Host, CertificateAuthorityData: config.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: config.CertData, ClientKeyData: config.KeyData}
	kc.Contexts["meridian"] = &clientcmdapi.Context{Cluster: "meridian", AuthInfo: "admin"}
	kc.CurrentContext = "meridian"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestWatchFailoverToStore: the replica serving a watch dies, the watch
// moves to the other replica, and that one drains too: with no replica
// left, the gateway goes on with the watch from the store, from the last
// event delivered. Every write arrives once, in order, no ERROR.
func TestWatchFailoverToStore(t *testing.T) {
	e := newReplicaEnv(t, func(s *replicaSetup) { s.proxied = true })
	ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
	defer cancel()
	seed, err := e.client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "seed"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := startRawWatch(t, ctx, e.config, "application/json", url.Values{"resourceVersion": {seed.ResourceVersion}})
	first := e.serving(t)
	wr := startWriter(ctx, e, "cm", nil)
	wr.await(t, 15)
	first.kill(dies)
	wr.await(t, 15)
	second := e.serving(t)
	if second == first {
		t.Fatal("the watch is still on the replica that died")
	}
	second.kill(drains)
	wr.await(t, 15)
	writes := wr.finish(t)
	final := writes[len(writes)-1]
	w.reach(t, final)
	sameEvents(t, w.got(), writes)
	// The drained replica may take (and end) the watch once more as it
	// stops: at least one move to a replica, one to the store.
	if r, s := e.resumes(t, "replica"), e.resumes(t, "store"); r < 1 || s != 1 {
		t.Fatalf("resumed %v times on a replica and %v on the store, want at least once and once", r, s)
	}
}

// TestWatchFailoverPastReplicaHistory: a watch of one label whose last
// event is older than the other replica's history (short here) loses its
// replica. The other replica answers 410; the store then serves the rest
// of the watch, with no gap. When the store has compacted that revision
// too, nothing can serve it: the client gets an ERROR event with 410
// Expired and the watch ends.
func TestWatchFailoverPastReplicaHistory(t *testing.T) {
	for _, compacted := range []bool{false, true} {
		t.Run(fmt.Sprint("compacted=", compacted), func(t *testing.T) {
			e := newReplicaEnv(t, func(s *replicaSetup) { s.proxied, s.history = true, 5 })
			ctx, cancel := context.WithTimeout(t.Context(), 120*time.Second)
			defer cancel()
			cms := e.client.CoreV1().ConfigMaps("default")
			seed, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "seed"}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			watched := map[string]string{"watched": "yes"}
			w := startRawWatch(t, ctx, e.config, "application/json", url.Values{"resourceVersion": {seed.ResourceVersion}, "labelSelector": {"watched=yes"}})
			from := e.serving(t)
			// One watched write, delivered; then enough others to push it
			// out of every replica's history.
			wr := startWriter(ctx, e, "watched", watched)
			wr.await(t, 1)
			before := wr.finish(t)
			waitFor(t, "the watched write", func() bool { return w.last() == before[len(before)-1] })
			others := startWriter(ctx, e, "other", nil)
			others.await(t, 20)
			others.finish(t)
			if compacted {
				compactStore(t, ctx, e.storeAddr)
			}
			from.kill(dies)
			if compacted {
				waitFor(t, "the watch to end", func() bool {
					select {
					case <-w.done:
						return true
					default:
						return false
					}
				})
				got := w.got()
				want := append(before, seen{rv: "410", name: string(metav1.StatusReasonExpired), typ: watch.Error})
				sameEvents(t, got, want)
				if !errors.Is(w.endErr, io.EOF) {
					t.Fatalf("the watch ended with %v after its ERROR, want the end of the response", w.endErr)
				}
				return
			}
			wr = startWriter(ctx, e, "late", watched)
			wr.await(t, 10)
			after := wr.finish(t)
			final := after[len(after)-1]
			w.reach(t, final)
			sameEvents(t, w.got(), append(before, after...))
			if s := e.resumes(t, "store"); s != 1 {
				t.Fatalf("resumed %v times on the store, want once", s)
			}
		})
	}
}

// compactStore compacts the store to its current revision.
func compactStore(t *testing.T, ctx context.Context, addr string) {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := storev1.NewMaintenanceServiceClient(conn).Status(ctx, &storev1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := storev1.NewKVServiceClient(conn).Compact(ctx, &storev1.CompactRequest{Revision: st.GetHeader().GetRevision()}); err != nil {
		t.Fatal(err)
	}
}
