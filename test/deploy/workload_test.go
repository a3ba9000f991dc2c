package deploy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"
)

// workloadNamespaces are the namespaces the workload writes and watches;
// each has one writer and one watcher per gateway.
var workloadNamespaces = []string{"fault-a", "fault-b"}

// record is one write the server acknowledged (or an event a watcher
// saw): its type (ADDED for a create, MODIFIED for an update), the
// object, its resourceVersion and the content it holds (data["v"]).
type record struct {
	typ, name, rv, v string
}

// errorCounts counts the errors clients saw, by kind, and keeps those
// that are not retried (which fail the test).
type errorCounts struct {
	mu    sync.Mutex
	kinds map[string]int
	// examples are each kind's first message.
	examples map[string]string
	fatals   []string
}

func (c *errorCounts) add(who string, err error) (retried bool) {
	kind, retried := classify(err)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.kinds[kind]++
	if _, ok := c.examples[kind]; !ok {
		c.examples[kind] = fmt.Sprintf("%s: %v", who, err)
	}
	if !retried {
		c.fatals = append(c.fatals, fmt.Sprintf("%s: %v", who, err))
	}
	return retried
}

// gaveUp records a write the client stopped retrying: whatever its
// error, a write given up on is a failure the client saw.
func (c *errorCounts) gaveUp(who string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fatals = append(c.fatals, fmt.Sprintf("%s: gave up: %v", who, err))
}

func (c *errorCounts) note(kind string) {
	c.mu.Lock()
	c.kinds[kind]++
	c.mu.Unlock()
}

// classify names an error's kind and tells whether a client retries it:
// the connection failing (the server or its container is gone, or a
// request timed out) and the server saying it cannot serve now (429, 5xx)
// are retried, as controllers built on client-go retry them; any other
// status (400s) is a client-visible failure.
func classify(err error) (string, bool) {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		s := status.Status()
		kind := fmt.Sprintf("HTTP %d %s", s.Code, s.Reason)
		return kind, s.Code == 429 || s.Code >= 500
	}
	msg := err.Error()
	// "unexpected EOF": the connection closed mid-response, as when the
	// gateway is killed after it sent the write on but before it replied;
	// the write may have landed, and the retry finds it (AlreadyExists).
	for _, k := range []string{"connection refused", "connection reset by peer", "broken pipe", "no route to host", "http2: client connection lost", "http2: server sent GOAWAY", "unexpected EOF"} {
		if strings.Contains(msg, k) {
			return k, true
		}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || strings.Contains(msg, "deadline exceeded") || strings.Contains(msg, "Client.Timeout") {
		return "timeout", true
	}
	if strings.Contains(msg, "EOF") {
		return "EOF", true
	}
	return "other: " + msg, false
}

// workload is the client-go workload of the fault test: per namespace
// and gateway, a writer creating and updating ConfigMaps and a watcher.
type workload struct {
	errs errorCounts

	mu sync.Mutex
	// acks are the acknowledged writes, per namespace.
	acks map[string][]record
	// last is each object's last acknowledged content, per namespace.
	last map[string]map[string]string

	watchers     []*watcher
	stopWriters  context.CancelFunc
	stopWatchers context.CancelFunc
	writers      sync.WaitGroup
}

// watcher follows one namespace through one gateway with client-go's
// RetryWatcher, which restarts each watch from the last resourceVersion
// it delivered.
type watcher struct {
	ns      string
	gateway int
	mu      sync.Mutex
	events  []record
	// gaps are the resourceVersion ranges (after, upTo] a relist after a
	// 410 Gone covered instead of events.
	gaps     [][2]uint64
	restarts int
	done     chan struct{}
}

// startWorkload creates the namespaces, starts the watchers from each
// namespace's list resourceVersion, then the writers. clients[i] and
// watchClients[i] (without a client-side request timeout) talk to gateway
// i.
func startWorkload(t *testing.T, clients, watchClients []kubernetes.Interface) *workload {
	t.Helper()
	w := &workload{errs: errorCounts{kinds: map[string]int{}, examples: map[string]string{}}, acks: map[string][]record{}, last: map[string]map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	w.stopWatchers = cancel
	wctx, wcancel := context.WithCancel(context.Background())
	w.stopWriters = wcancel
	t.Cleanup(func() { wcancel(); cancel() })
	for _, ns := range workloadNamespaces {
		w.last[ns] = map[string]string{}
		if _, err := clients[0].CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create namespace %s: %v", ns, err)
		}
		awaitRootCA(t, clients[0], ns)
		for g, c := range watchClients {
			list, err := c.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatalf("list configmaps in %s through gateway %d: %v", ns, g, err)
			}
			wt := &watcher{ns: ns, gateway: g, done: make(chan struct{})}
			w.watchers = append(w.watchers, wt)
			go wt.run(ctx, t, c, list.ResourceVersion, &w.errs)
		}
	}
	for _, ns := range workloadNamespaces {
		for g, c := range clients {
			w.writers.Add(1)
			go func() {
				defer w.writers.Done()
				w.write(wctx, c, ns, fmt.Sprintf("w%d", g))
			}()
		}
	}
	return w
}

// writeBackoff is the writers' retry: every 250 ms for up to a minute
// per write, longer than a killed gateway or store leader takes to come
// back. (A growing backoff with a Cap would not do: wait.Backoff stops
// stepping once the cap is reached, after a few seconds.)
var writeBackoff = wait.Backoff{Duration: 250 * time.Millisecond, Jitter: 0.1, Steps: 240}

// write creates ConfigMap n and updates ConfigMap n-1, in turn, until ctx
// ends, each with client-go's retry on transient errors. A create retried
// after an error may meet AlreadyExists (the first attempt was applied):
// the object is then read, and acknowledged if it holds what was sent. An
// update retried is preceded by a read: if the object already holds the
// new content the earlier attempt was applied; otherwise the update is
// sent again with the read resourceVersion as its precondition, so each
// acknowledged write is exactly one change of the object.
func (w *workload) write(ctx context.Context, c kubernetes.Interface, ns, writer string) {
	cms := c.CoreV1().ConfigMaps(ns)
	var prev *corev1.ConfigMap
	for n := 0; ctx.Err() == nil; n++ {
		name := fmt.Sprintf("%s-%04d", writer, n)
		want := name + "-created"
		var got *corev1.ConfigMap
		attempt := 0
		err := retry.OnError(writeBackoff, func(err error) bool { return w.errs.add("create "+ns+"/"+name, err) }, func() error {
			attempt++
			var err error
			got, err = cms.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": want}}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) && attempt > 1 {
				w.errs.note("AlreadyExists on a retried create (first attempt applied)")
				got, err = cms.Get(context.Background(), name, metav1.GetOptions{})
				if err == nil && got.Data["v"] != want {
					return fmt.Errorf("%s/%s exists with %q, not the %q sent", ns, name, got.Data["v"], want)
				}
			}
			return err
		})
		if err != nil {
			w.errs.gaveUp("create "+ns+"/"+name, err)
			return
		}
		w.ack(record{"ADDED", name, got.ResourceVersion, want}, ns)
		created := got
		if prev != nil {
			var updated *corev1.ConfigMap
			upd := prev.DeepCopy()
			want := prev.Name + "-updated"
			upd.Data = map[string]string{"v": want}
			err := retry.OnError(writeBackoff, func(err error) bool {
				return apierrors.IsConflict(err) || w.errs.add("update "+ns+"/"+upd.Name, err)
			}, func() error {
				var err error
				updated, err = cms.Update(context.Background(), upd, metav1.UpdateOptions{})
				if err == nil {
					return nil
				}
				cur, gerr := cms.Get(context.Background(), upd.Name, metav1.GetOptions{})
				if gerr != nil {
					return err
				}
				if cur.Data["v"] == want {
					w.errs.note("update applied by an attempt whose reply was lost")
					updated = cur
					return nil
				}
				if apierrors.IsConflict(err) {
					w.errs.note("HTTP 409 Conflict after a retried update (precondition from the re-read)")
				}
				upd.ResourceVersion = cur.ResourceVersion
				return err
			})
			if err != nil {
				w.errs.gaveUp("update "+ns+"/"+upd.Name, err)
				return
			}
			w.ack(record{"MODIFIED", upd.Name, updated.ResourceVersion, want}, ns)
		}
		// Objects with an odd n are updated in the next round; the others
		// stay as created.
		prev = nil
		if n%2 == 1 {
			prev = created
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (w *workload) ack(r record, ns string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.acks[ns] = append(w.acks[ns], r)
	w.last[ns][r.name] = r.v
}

// run follows the namespace from resourceVersion rv until ctx ends. A 410
// Gone (the RetryWatcher stops on it) is answered by a relist, recorded
// as a gap the final list check covers, and a new watch from the list.
func (wt *watcher) run(ctx context.Context, t *testing.T, c kubernetes.Interface, rv string, errs *errorCounts) {
	defer close(wt.done)
	who := fmt.Sprintf("watch %s through gateway %d", wt.ns, wt.gateway)
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		wt.mu.Lock()
		wt.restarts++
		wt.mu.Unlock()
		// Each watch ends after at most 30 s and resumes from its last
		// resourceVersion, as a reflector's does.
		timeout := int64(30)
		o.TimeoutSeconds = &timeout
		i, err := c.CoreV1().ConfigMaps(wt.ns).Watch(ctx, o)
		if err != nil && ctx.Err() == nil {
			errs.add(who, err)
		}
		return i, err
	}}
	for started := false; ctx.Err() == nil; started = true {
		if started {
			time.Sleep(time.Second) // after a relist, or a RetryWatcher that gave up
		}
		rw, err := watchtools.NewRetryWatcherWithContext(ctx, rv, lw)
		if err != nil {
			errs.add(who, err)
			return
		}
		for ev := range rw.ResultChan() {
			switch ev.Type {
			case watch.Added, watch.Modified, watch.Deleted:
				cm := ev.Object.(*corev1.ConfigMap)
				rv = cm.ResourceVersion
				wt.mu.Lock()
				wt.events = append(wt.events, record{string(ev.Type), cm.Name, cm.ResourceVersion, cm.Data["v"]})
				wt.mu.Unlock()
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				if !apierrors.IsGone(err) && !apierrors.IsResourceExpired(err) {
					errs.add(who, err)
					continue
				}
				errs.note("HTTP 410 Gone on a watch (relisted)")
				list, lerr := c.CoreV1().ConfigMaps(wt.ns).List(ctx, metav1.ListOptions{})
				for lerr != nil && ctx.Err() == nil {
					errs.add(who+" (relist)", lerr)
					time.Sleep(time.Second)
					list, lerr = c.CoreV1().ConfigMaps(wt.ns).List(ctx, metav1.ListOptions{})
				}
				if lerr != nil {
					return
				}
				wt.mu.Lock()
				wt.gaps = append(wt.gaps, [2]uint64{rvNumber(t, rv), rvNumber(t, list.ResourceVersion)})
				wt.mu.Unlock()
				rv = list.ResourceVersion
				rw.Stop()
			}
		}
	}
}

// rootCAConfigMap is the ConfigMap the control plane publishes in every
// namespace (the cluster's CA for service account tokens).
const rootCAConfigMap = "kube-root-ca.crt"

// awaitRootCA waits until the control plane has published
// rootCAConfigMap in a new namespace, so that the watchers start after it
// and see only the workload's writes.
func awaitRootCA(t *testing.T, c kubernetes.Interface, ns string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := c.CoreV1().ConfigMaps(ns).Get(context.Background(), rootCAConfigMap, metav1.GetOptions{})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s was never published: %v", ns, rootCAConfigMap, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// rvNumber reads a resourceVersion as a number: meridian's are the
// store's revisions, increasing with every write (the order a watcher
// must see them in).
func rvNumber(t *testing.T, rv string) uint64 {
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		t.Errorf("resourceVersion %q is not a revision: %v", rv, err)
	}
	return n
}

// finish stops the writers, waits until every watcher has seen the last
// acknowledged write of its namespace (or the deadline), stops the
// watchers and checks the outcome: every acknowledged write listed with
// its acknowledged content through each gateway, every watcher's events
// exactly the namespace's acknowledged writes in resourceVersion order
// (once each; a relisted range is checked against the list instead), and
// no error but retried ones. It logs the error counts by kind.
func (w *workload) finish(t *testing.T, clients []kubernetes.Interface) {
	t.Helper()
	w.stopWriters()
	w.writers.Wait()

	w.mu.Lock()
	defer w.mu.Unlock()
	total := 0
	for ns, acks := range w.acks {
		total += len(acks)
		sort.Slice(acks, func(i, j int) bool { return rvNumber(t, acks[i].rv) < rvNumber(t, acks[j].rv) })
		w.acks[ns] = acks
	}
	deadline := time.Now().Add(time.Minute)
	for _, wt := range w.watchers {
		acks := w.acks[wt.ns]
		if len(acks) == 0 {
			continue
		}
		want := rvNumber(t, acks[len(acks)-1].rv)
		for {
			wt.mu.Lock()
			n := len(wt.events)
			var at uint64
			if n > 0 {
				at = rvNumber(t, wt.events[n-1].rv)
			}
			wt.mu.Unlock()
			if at >= want || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	w.stopWatchers()
	for _, wt := range w.watchers {
		<-wt.done
	}
	t.Logf("client-go workload: %d acknowledged writes in %d namespaces", total, len(w.acks))

	for _, ns := range workloadNamespaces {
		acks := w.acks[ns]
		if len(acks) < 10 {
			t.Errorf("namespace %s: only %d acknowledged writes", ns, len(acks))
		}
		for g, c := range clients {
			list, err := c.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Errorf("final list of %s through gateway %d: %v", ns, g, err)
				continue
			}
			have := map[string]string{}
			for _, cm := range list.Items {
				if cm.Name != rootCAConfigMap {
					have[cm.Name] = cm.Data["v"]
				}
			}
			for name, v := range w.last[ns] {
				if have[name] != v {
					t.Errorf("gateway %d lists %s/%s with %q, the acknowledged content is %q", g, ns, name, have[name], v)
				}
			}
			if len(have) != len(w.last[ns]) {
				t.Errorf("gateway %d lists %d ConfigMaps in %s, %d were acknowledged", g, len(have), ns, len(w.last[ns]))
			}
		}
	}
	for _, wt := range w.watchers {
		wt.mu.Lock()
		checkWatcher(t, wt, w.acks[wt.ns])
		t.Logf("watcher of %s through gateway %d: %d events, %d watch requests, %d relists", wt.ns, wt.gateway, len(wt.events), wt.restarts, len(wt.gaps))
		wt.mu.Unlock()
	}
	w.errs.mu.Lock()
	defer w.errs.mu.Unlock()
	var kinds []string
	for k, n := range w.errs.kinds {
		line := fmt.Sprintf("  %5d  %s", n, k)
		if e, ok := w.errs.examples[k]; ok {
			line += " (first: " + e + ")"
		}
		kinds = append(kinds, line)
	}
	sort.Strings(kinds)
	t.Logf("errors clients saw, by kind (all retried unless listed below):\n%s", strings.Join(kinds, "\n"))
	for _, f := range w.errs.fatals {
		t.Errorf("a client saw an error it does not retry: %s", f)
	}
}

// checkWatcher compares a watcher's events with the acknowledged writes
// of its namespace, both in resourceVersion order: the same writes, each
// once, with the same type and content; inside a relisted range the
// events are absent and the final list check covers the objects.
func checkWatcher(t *testing.T, wt *watcher, acks []record) {
	t.Helper()
	inGap := func(rv uint64) bool {
		for _, g := range wt.gaps {
			if rv > g[0] && rv <= g[1] {
				return true
			}
		}
		return false
	}
	var want []record
	for _, a := range acks {
		if !inGap(rvNumber(t, a.rv)) {
			want = append(want, a)
		}
	}
	who := fmt.Sprintf("watcher of %s through gateway %d", wt.ns, wt.gateway)
	var prev uint64
	for i, ev := range wt.events {
		rv := rvNumber(t, ev.rv)
		if rv <= prev {
			t.Errorf("%s: event %d (%s %s rv %s) is not after rv %d: out of order or repeated", who, i, ev.typ, ev.name, ev.rv, prev)
		}
		prev = rv
	}
	i, j := 0, 0
	for i < len(want) || j < len(wt.events) {
		switch {
		case j == len(wt.events) || i < len(want) && rvNumber(t, want[i].rv) < rvNumber(t, wt.events[j].rv):
			t.Errorf("%s: missed the acknowledged %s of %s at rv %s", who, want[i].typ, want[i].name, want[i].rv)
			i++
		case i == len(want) || rvNumber(t, wt.events[j].rv) < rvNumber(t, want[i].rv):
			t.Errorf("%s: event %s %s at rv %s is no acknowledged write", who, wt.events[j].typ, wt.events[j].name, wt.events[j].rv)
			j++
		default:
			if want[i] != wt.events[j] {
				t.Errorf("%s: event %+v, the acknowledged write was %+v", who, wt.events[j], want[i])
			}
			i++
			j++
		}
	}
}

// clientFor is a client-go clientset for a gateway's published address,
// authenticated with the admin kubeconfig, with a client-side timeout per
// request (0: none, for watches, which the server's watch timeout ends)
// and client-go's rate limit at qps requests per second (<= 0: none; the
// workloads bound their own load).
func clientFor(t *testing.T, base *rest.Config, server string, timeout time.Duration, qps float32) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(base)
	cfg.Host = server
	cfg.QPS, cfg.Burst = -1, 0
	if qps > 0 {
		cfg.QPS, cfg.Burst = qps, 1
	}
	cfg.Timeout = timeout
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
