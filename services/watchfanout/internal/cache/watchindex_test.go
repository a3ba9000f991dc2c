package cache

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/selection"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// testResource is a configmaps cache with nothing behind it: the test
// applies changes itself.
func testResource(t testing.TB) *Resource {
	t.Helper()
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	reg := registry.New(registry.Core()...)
	res, _ := reg.Lookup(corev1.SchemeGroupVersion.WithResource("configmaps"))
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	opts := &Options{Registry: reg, Codec: c, HistoryWindow: time.Hour, HistoryMaxEvents: 1 << 20, WatcherBuffer: 1 << 20}
	return newResource(res, newEncoders(c, res, nil), opts, m.forResource("", "v1", "configmaps"))
}

// storedOf is obj as the store holds it, as the cache keeps it.
func storedOf(t testing.TB, r *Resource, obj runtime.Object) *object {
	t.Helper()
	v, err := r.enc.codec.EncodeStorage(obj)
	if err != nil {
		t.Fatal(err)
	}
	o, err := newObject(r.enc, v, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func configMap(ns, name string, labels map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
	}
}

// subscribe registers a watcher of namespace ns selecting label and
// field, starting after revision after (negative: the current one); it
// is closed when the test ends.
func subscribe(t testing.TB, r *Resource, ns, label, field string, after int64) *Subscription {
	t.Helper()
	f, err := selection.New(r.Registry(), label, field)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := r.Watch(WatchOptions{Namespace: ns, Filter: f, After: after, OnPending: func() {}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sub.Close)
	return sub
}

// randomChanges is n random changes of ConfigMaps at revisions 1 to n,
// drawn from rng: each of a namespace of namespaces and a name of names,
// a delete one time in deleteOneIn when the object exists, else a write
// of the object with labels(rng).
func randomChanges(t testing.TB, r *Resource, rng *rand.Rand, n int64, namespaces, names []string, deleteOneIn int, labels func(*rand.Rand) map[string]string) []change {
	t.Helper()
	live := map[string]bool{}
	var chs []change
	for rev := int64(1); rev <= n; rev++ {
		ns, name := namespaces[rng.IntN(len(namespaces))], names[rng.IntN(len(names))]
		key := r.res.Key(ns, name)
		if live[key] && rng.IntN(deleteOneIn) == 0 {
			delete(live, key)
			chs = append(chs, change{key: key, rev: rev})
			continue
		}
		live[key] = true
		chs = append(chs, change{key: key, rev: rev, obj: storedOf(t, r, configMap(ns, name, labels(rng)))})
	}
	return chs
}

// TestIndexedDispatchEqualsScan: with watchers filed by name and label,
// every watcher receives exactly what offering every event to every
// watcher would give it, over random creates, label changes (selector
// transitions) and deletes.
func TestIndexedDispatchEqualsScan(t *testing.T) {
	r := testResource(t)
	selectors := []struct{ label, field string }{
		{"", ""},
		{"app=a", ""},
		{"app==b", ""},
		{"app in (c)", ""},
		{"app in (a,b)", ""}, // not indexable
		{"app!=a", ""},       // not indexable
		{"tier=x,app=c", ""},
		{"tier", ""},
		{"", "metadata.name=cm3"},
		{"app=a", "metadata.name=cm1"},
		{"", "metadata.name!=cm2"},
	}
	var subs []*Subscription
	for _, ns := range []string{"", "ns0", "ns1"} {
		for _, sel := range selectors {
			subs = append(subs, subscribe(t, r, ns, sel.label, sel.field, -1))
		}
	}
	indexed := 0
	for _, s := range subs {
		if s.key.kind != keyNone {
			indexed++
		}
	}
	if indexed == 0 || indexed == len(subs) {
		t.Fatalf("%d of %d watchers indexed: the test covers nothing", indexed, len(subs))
	}

	labels := func(rng *rand.Rand) map[string]string {
		pick := func(vals ...string) string { return vals[rng.IntN(len(vals))] }
		labels := map[string]string{}
		if v := pick("a", "b", "c", ""); v != "" {
			labels["app"] = v
		}
		if v := pick("x", "y", ""); v != "" {
			labels["tier"] = v
		}
		return labels
	}
	chs := randomChanges(t, r, rand.New(rand.NewPCG(1, 2)), 3000, []string{"ns0", "ns1", "ns2"}, []string{"cm0", "cm1", "cm2", "cm3", "cm4"}, 5, labels)
	r.applyBatch(chs, 3000, time.Now())

	r.mu.Lock()
	hist := r.mu.hist[r.mu.head:]
	r.mu.Unlock()
	total := 0
	for i, s := range subs {
		var want []Item
		for _, ev := range hist {
			v := newView(ev)
			if kind, ok := s.kindFor(&v); ok {
				want = append(want, Item{Ev: ev, Kind: kind})
			}
		}
		got, err := s.TryNext(nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("watcher %d (ns %q, %v): %d events, want %d", i, s.ns, s.key, len(got), len(want))
		}
		for j := range want {
			if got[j] != want[j] {
				t.Fatalf("watcher %d event %d: got rev %d kind %d, want rev %d kind %d", i, j, got[j].Ev.Rev, got[j].Kind, want[j].Ev.Rev, want[j].Kind)
			}
		}
		total += len(want)
	}
	if total == 0 {
		t.Fatal("no watcher received anything")
	}
	// Unregistering empties the index.
	for _, s := range subs {
		s.Close()
	}
	if n := r.mu.watchers.len(); n != 0 || len(r.mu.watchers.byNS) != 0 {
		t.Fatalf("%d watchers, %d namespaces left after Close", n, len(r.mu.watchers.byNS))
	}
}

// BenchmarkDispatch is the cost of one event with 10,000 watchers in its
// namespace, each selecting its own object: filed by label (indexed) or
// with an equivalent selector the index cannot use (scanned).
func BenchmarkDispatch(b *testing.B) {
	for _, mode := range []struct{ name, sel string }{{"indexed", "app=app-%d"}, {"scanned", "app in (app-%d,none)"}} {
		b.Run(mode.name, func(b *testing.B) {
			r := testResource(b)
			r.opts.HistoryMaxEvents = 1000
			const watchers = 10000
			for i := range watchers {
				subscribe(b, r, "ns", fmt.Sprintf(mode.sel, i), "", -1)
			}
			key := r.res.Key("ns", "cm")
			objs := make([]*object, watchers)
			for i := range objs {
				objs[i] = storedOf(b, r, configMap("ns", "cm", map[string]string{"app": fmt.Sprintf("app-%d", i)}))
			}
			b.ResetTimer()
			for i := range b.N {
				r.applyBatch([]change{{key: key, rev: int64(i + 1), obj: objs[i%watchers]}}, int64(i+1), time.Now())
				if i%500 == 499 {
					// Keep the queues from growing with b.N.
					b.StopTimer()
					r.mu.Lock()
					r.mu.watchers.all(func(w *Watcher) { w.mu.Lock(); w.mu.queue = w.mu.queue[:0]; w.mu.Unlock() })
					r.mu.Unlock()
					b.StartTimer()
				}
			}
		})
	}
}

// TestReplayEqualsLive: a watch that replays the history from before the
// first change receives what a watch registered before it received live,
// for every namespace and selector: the replay holds every namespace's
// events, and the watch's own namespace and selectors pick its.
func TestReplayEqualsLive(t *testing.T) {
	r := testResource(t)
	selectors := []struct{ label, field string }{
		{"", ""},
		{"app=a", ""},
		{"app!=a", ""},
		{"", "metadata.name=cm1"},
		{"", "metadata.namespace=ns1"},
	}
	type pair struct {
		ns, label, field string
		live             *Subscription
	}
	var pairs []pair
	for _, ns := range []string{"", "ns0", "ns1"} {
		for _, sel := range selectors {
			pairs = append(pairs, pair{ns: ns, label: sel.label, field: sel.field, live: subscribe(t, r, ns, sel.label, sel.field, -1)})
		}
	}
	labels := func(rng *rand.Rand) map[string]string {
		if rng.IntN(2) == 0 {
			return map[string]string{"app": "a"}
		}
		return nil
	}
	chs := randomChanges(t, r, rand.New(rand.NewPCG(3, 4)), 500, []string{"ns0", "ns1", "ns2"}, []string{"cm0", "cm1", "cm2"}, 4, labels)
	r.applyBatch(chs, 500, time.Now())

	for _, p := range pairs {
		sub := subscribe(t, r, p.ns, p.label, p.field, 0)
		var replayed []Item
		for _, ev := range sub.Replay {
			if kind, ok := sub.Kind(ev); ok {
				replayed = append(replayed, Item{Ev: ev, Kind: kind})
			}
		}
		sub.Close()
		got, err := p.live.TryNext(nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(replayed) != len(got) {
			t.Fatalf("ns %q %q %q: %d events replayed, %d live", p.ns, p.label, p.field, len(replayed), len(got))
		}
		for i := range got {
			if replayed[i] != got[i] {
				t.Fatalf("ns %q %q %q event %d: replayed %s rev %d kind %d, live %s rev %d kind %d", p.ns, p.label, p.field, i,
					replayed[i].Ev.Key, replayed[i].Ev.Rev, replayed[i].Kind, got[i].Ev.Key, got[i].Ev.Rev, got[i].Kind)
			}
		}
	}
}
