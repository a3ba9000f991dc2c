package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/meridian-cp/meridian/internal/allinone"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// watchSeedEnv overrides the seed of TestRandomWatchesMatchTheStore.
const watchSeedEnv = "MERIDIAN_WATCH_SEED"

// TestRandomWatchesMatchTheStore writes a random sequence of creates,
// updates (labels and data) and deletes of ConfigMaps across namespaces,
// then opens random watches — namespace or all, label selector, field
// selector on metadata.name / metadata.namespace, resourceVersion unset,
// "0", N in the history, or sendInitialEvents — over HTTP (JSON and
// protobuf) and the gRPC API, and checks that each watch streams exactly
// the store's history filtered by the watch's own rules, as
// kube-apiserver's watch does:
//
//   - initial state (resourceVersion unset or "0", sendInitialEvents):
//     ADDED for every selected object of the state, in key order (then the
//     initial-events-end bookmark for sendInitialEvents);
//   - after revision N: for each later change of a selected namespace, its
//     state before (prev) and after (cur) tested against the selectors:
//     both → MODIFIED cur, cur only → ADDED cur (entered the selectors),
//     prev only → DELETED prev at the change's revision (left them, or was
//     deleted).
//
// Every watch allows bookmarks and is read until a bookmark at or past
// the last revision written: everything before it has been sent.
// It runs against watchfanout and against the store (watchfanout
// disabled). The seed is logged on failure; MERIDIAN_WATCH_SEED replays
// one.
func TestRandomWatchesMatchTheStore(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(watchSeedEnv); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", watchSeedEnv, s, err)
		}
		seed = n
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("seed %d: rerun with %s=%d", seed, watchSeedEnv, seed)
		}
	})
	eachWatchServer(t, func(t *testing.T, i int, e *env) {
		randomWatches(t, e, rand.New(rand.NewPCG(seed, uint64(i))))
	}, func(c *allinone.Config) { c.Watchfanout.BookmarkInterval = 500 * time.Millisecond })
}

// The random test's bounds: the writes, the watches, and how long a watch
// may take to reach the last revision.
const (
	randomWrites       = 150
	randomWatchCount   = 40
	randomWatchTimeout = 60 * time.Second
)

func randomWatches(t *testing.T, e *env, rng *rand.Rand) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	namespaces := []string{"rnd-0", "rnd-1", "rnd-2"}
	for _, ns := range namespaces {
		if _, err := e.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	first := currentRevision(ctx, t, e)
	writeRandomly(ctx, t, e, rng, namespaces)
	// A consistent list: the revision every write is at or below, and (on
	// watchfanout) a cache that has reached it.
	last := currentRevision(ctx, t, e)
	hist := e.configMapHistory(ctx, last)

	specs := make([]watchSpec, randomWatchCount)
	for i := range specs {
		specs[i] = randomWatchSpec(rng, namespaces, first, last)
	}
	c := watchClients{
		json:     e.clientFor(t, "application/json"),
		protobuf: e.clientFor(t, "application/vnd.kubernetes.protobuf"),
		api:      e.grpcAPI(),
	}
	got := make([][]observed, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, w := range specs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wctx, stop := context.WithTimeout(ctx, randomWatchTimeout)
			defer stop()
			got[i], errs[i] = w.run(wctx, c, last)
		}()
	}
	wg.Wait()
	checked := 0
	for i, w := range specs {
		want := w.expected(hist)
		if errs[i] != nil {
			t.Errorf("watch %d %s: %v; %s", i, w, errs[i], diffEvents(got[i], want))
			continue
		}
		if !slices.Equal(got[i], want) {
			t.Errorf("watch %d %s: events differ from the store's:\n%s", i, w, diffEvents(got[i], want))
		}
		checked += len(want)
	}
	if checked == 0 {
		t.Fatal("no watch expected any event: the test checked nothing")
	}
	t.Logf("%d watches, %d events checked, revisions %d..%d", len(specs), checked, first, last)
}

// currentRevision is the resourceVersion of a consistent list of every
// ConfigMap.
func currentRevision(ctx context.Context, t *testing.T, e *env) int64 {
	t.Helper()
	l, err := e.client.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := strconv.ParseInt(l.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// writeRandomly creates, updates and deletes ConfigMaps cm-0…cm-3 of the
// namespaces with random labels (app: a|b|none, tier: x|none) and data;
// some updates change nothing.
func writeRandomly(ctx context.Context, t *testing.T, e *env, rng *rand.Rand, namespaces []string) {
	t.Helper()
	live := map[string]*corev1.ConfigMap{}
	randomLabels := func() map[string]string {
		l := map[string]string{}
		if v := []string{"a", "b", ""}[rng.IntN(3)]; v != "" {
			l["app"] = v
		}
		if rng.IntN(2) == 0 {
			l["tier"] = "x"
		}
		return l
	}
	for i := range randomWrites {
		ns, name := namespaces[rng.IntN(len(namespaces))], fmt.Sprintf("cm-%d", rng.IntN(4))
		cms := e.client.CoreV1().ConfigMaps(ns)
		key := ns + "/" + name
		cur := live[key]
		var err error
		switch {
		case cur == nil:
			cur, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: randomLabels()}, Data: map[string]string{"v": strconv.Itoa(i)}}, metav1.CreateOptions{})
			live[key] = cur
		case rng.IntN(4) == 0:
			err = cms.Delete(ctx, name, metav1.DeleteOptions{})
			delete(live, key)
		default:
			next := cur.DeepCopy()
			switch rng.IntN(4) {
			case 0: // no change
			case 1:
				next.Data = map[string]string{"v": strconv.Itoa(i)}
			default:
				next.Labels = randomLabels()
			}
			live[key], err = cms.Update(ctx, next, metav1.UpdateOptions{})
		}
		if err != nil {
			t.Fatalf("write %d (%s): %v", i, key, err)
		}
	}
}

// storeChange is one change of a ConfigMap in the store: its state before
// (nil: created) and after (nil: deleted), both at the change's revision.
type storeChange struct {
	rev       int64
	key       string
	cur, prev *corev1.ConfigMap
}

// configMapHistory reads every ConfigMap change up to revision last from
// the store's own watch, from its first revision.
func (e *env) configMapHistory(ctx context.Context, last int64) []storeChange {
	t := e.t
	t.Helper()
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ws, err := storev1.NewWatchServiceClient(e.storeConn(gatewayCert)).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	prefix := "/registry/configmaps/"
	if err := ws.Send(&storev1.WatchRequest{RequestUnion: &storev1.WatchRequest_CreateRequest{CreateRequest: &storev1.WatchCreateRequest{
		Key: []byte(prefix), RangeEnd: []byte(prefix[:len(prefix)-1] + "0"), StartRevision: 1, PrevKv: true,
	}}}); err != nil {
		t.Fatal(err)
	}
	decode := func(kv *storev1.KeyValue, rev int64) *corev1.ConfigMap {
		if kv == nil || len(kv.GetValue()) == 0 {
			return nil
		}
		cm := &corev1.ConfigMap{}
		if err := c.DecodeStorage(kv.GetValue(), rev, cm); err != nil {
			t.Fatalf("decode %s: %v", kv.GetKey(), err)
		}
		return cm
	}
	var out []storeChange
	for {
		resp, err := ws.Recv()
		if err != nil {
			t.Fatalf("store watch: %v", err)
		}
		if resp.GetCanceled() {
			t.Fatalf("store watch canceled (compacted at %d): %s", resp.GetCompactRevision(), resp.GetCancelReason())
		}
		for _, ev := range resp.GetEvents() {
			rev := ev.GetKv().GetModRevision()
			if rev > last {
				continue
			}
			ch := storeChange{rev: rev, key: string(ev.GetKv().GetKey()), prev: decode(ev.GetPrevKv(), rev)}
			if ev.GetType() == storev1.Event_TYPE_PUT {
				ch.cur = decode(ev.GetKv(), rev)
			}
			out = append(out, ch)
		}
		if resp.GetProgressNotify() && resp.GetHeader().GetRevision() >= last {
			return out // every event up to last has been sent
		}
		if resp.GetCreated() || resp.GetProgressNotify() {
			// Ask up to where the watch has sent everything.
			if err := ws.Send(&storev1.WatchRequest{RequestUnion: &storev1.WatchRequest_ProgressRequest{ProgressRequest: &storev1.WatchProgressRequest{}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// watchSpec is one random watch.
type watchSpec struct {
	ns, labelSel, fieldSel string
	// start: "unset", "0", "N" (rv) or "initial" (sendInitialEvents=true,
	// NotOlderThan rv, "" when rv is 0).
	start string
	rv    int64
	// transport: "json", "protobuf" (client-go over HTTP) or "grpc" (the
	// gRPC API, JSON frames).
	transport string
}

func (w watchSpec) String() string {
	return fmt.Sprintf("{ns %q labels %q fields %q start %s rv %d over %s}", w.ns, w.labelSel, w.fieldSel, w.start, w.rv, w.transport)
}

func randomWatchSpec(rng *rand.Rand, namespaces []string, first, last int64) watchSpec {
	pick := func(vals ...string) string { return vals[rng.IntN(len(vals))] }
	w := watchSpec{
		ns:        pick(append([]string{"", "", "empty"}, namespaces...)...),
		labelSel:  pick("", "", "app=a", "app!=a", "app in (a,b)", "!app", "tier", "tier=x,app=b", "app notin (b)"),
		fieldSel:  pick("", "", "metadata.name=cm-1", "metadata.name!=cm-0", "metadata.namespace="+namespaces[1], "metadata.name=cm-2,metadata.namespace="+namespaces[2]),
		start:     pick("unset", "0", "N", "N", "N", "initial"),
		transport: pick("json", "protobuf", "grpc"),
	}
	switch w.start {
	case "N":
		w.rv = first + rng.Int64N(last-first)
	case "initial":
		if rng.IntN(2) == 0 {
			w.rv = first + rng.Int64N(last-first+1)
		}
	}
	return w
}

// options are the watch's list options.
func (w watchSpec) options() metav1.ListOptions {
	o := metav1.ListOptions{LabelSelector: w.labelSel, FieldSelector: w.fieldSel, AllowWatchBookmarks: true}
	switch w.start {
	case "0":
		o.ResourceVersion = "0"
	case "N":
		o.ResourceVersion = strconv.FormatInt(w.rv, 10)
	case "initial":
		yes := true
		o.SendInitialEvents, o.ResourceVersionMatch = &yes, metav1.ResourceVersionMatchNotOlderThan
		if w.rv > 0 {
			o.ResourceVersion = strconv.FormatInt(w.rv, 10)
		}
	}
	return o
}

// observed is one watch event as compared: bookmarks only as the
// initial-events-end one (ENDBOOKMARK, no object), periodic ones not at all.
type observed struct {
	typ, ns, name, rv, labels, data string
}

func (o observed) String() string {
	if o.typ == "ENDBOOKMARK" {
		return o.typ
	}
	return fmt.Sprintf("%s %s/%s rv %s labels {%s} data %s", o.typ, o.ns, o.name, o.rv, o.labels, o.data)
}

func observe(typ watch.EventType, cm *corev1.ConfigMap) observed {
	return observed{typ: string(typ), ns: cm.Namespace, name: cm.Name, rv: cm.ResourceVersion, labels: labels.Set(cm.Labels).String(), data: fmt.Sprint(cm.Data)}
}

// errNoEnd: the watch ended before a bookmark at the last revision.
var errNoEnd = errors.New("the watch ended before a bookmark at the last revision")

// watchClients are the clients a watchSpec's transport picks from.
type watchClients struct {
	json, protobuf kubernetes.Interface
	api            apiv1.ResourceServiceClient
}

// run opens the watch and returns its events up to the first bookmark at
// or past revision last.
func (w watchSpec) run(ctx context.Context, c watchClients, last int64) ([]observed, error) {
	var out []observed
	// add records an event; done once it is a bookmark at or past last.
	add := func(typ watch.EventType, obj any) (done bool, err error) {
		switch o := obj.(type) {
		case *metav1.Status:
			return false, fmt.Errorf("ERROR event: %d %s: %s", o.Code, o.Reason, o.Message)
		case *corev1.ConfigMap:
			if typ != watch.Bookmark {
				out = append(out, observe(typ, o))
				return false, nil
			}
			if o.Annotations[metav1.InitialEventsAnnotationKey] == "true" {
				out = append(out, observed{typ: "ENDBOOKMARK"})
			}
			rv, err := strconv.ParseInt(o.ResourceVersion, 10, 64)
			return err == nil && rv >= last, err
		}
		return false, fmt.Errorf("%s event of a %T", typ, obj)
	}
	opts := w.options()
	if w.transport == "grpc" {
		ch, err := grpcWatch(ctx, c.api, &apiv1.WatchRequest{
			Ref:           &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: w.ns},
			LabelSelector: opts.LabelSelector, FieldSelector: opts.FieldSelector, ResourceVersion: opts.ResourceVersion,
			ResourceVersionMatch: string(opts.ResourceVersionMatch), AllowWatchBookmarks: true, SendInitialEvents: opts.SendInitialEvents,
		})
		if err != nil {
			return nil, fmt.Errorf("open: %w", err)
		}
		for f := range ch {
			var obj any = &corev1.ConfigMap{}
			if f.Type == string(watch.Error) {
				obj = &metav1.Status{}
			}
			if err := json.Unmarshal(f.Object, obj); err != nil {
				return out, err
			}
			if done, err := add(watch.EventType(f.Type), obj); done || err != nil {
				return out, err
			}
		}
		return out, errors.Join(errNoEnd, ctx.Err())
	}
	client := c.json
	if w.transport == "protobuf" {
		client = c.protobuf
	}
	wi, err := client.CoreV1().ConfigMaps(w.ns).Watch(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	defer wi.Stop()
	for ev := range wi.ResultChan() {
		if done, err := add(ev.Type, ev.Object); done || err != nil {
			return out, err
		}
	}
	return out, errors.Join(errNoEnd, ctx.Err())
}

// matches reports whether the watch selects cm.
func (w watchSpec) matches(cm *corev1.ConfigMap) bool {
	if w.ns != "" && cm.Namespace != w.ns {
		return false
	}
	ls, err := labels.Parse(w.labelSel)
	if err != nil {
		panic(err)
	}
	fs, err := fields.ParseSelector(w.fieldSel)
	if err != nil {
		panic(err)
	}
	return ls.Matches(labels.Set(cm.Labels)) && fs.Matches(fields.Set{"metadata.name": cm.Name, "metadata.namespace": cm.Namespace})
}

// expected is what the watch must stream, from the store's history.
func (w watchSpec) expected(hist []storeChange) []observed {
	var out []observed
	if w.start != "N" {
		// The state at the last revision (every watch starts at or after
		// it: writes are over), in key order.
		state := map[string]*corev1.ConfigMap{}
		for _, ch := range hist {
			if ch.cur == nil {
				delete(state, ch.key)
			} else {
				state[ch.key] = ch.cur
			}
		}
		keys := make([]string, 0, len(state))
		for k := range state {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if w.matches(state[k]) {
				out = append(out, observe(watch.Added, state[k]))
			}
		}
		if w.start == "initial" {
			out = append(out, observed{typ: "ENDBOOKMARK"})
		}
		return out
	}
	for _, ch := range hist {
		if ch.rev <= w.rv {
			continue
		}
		cur := ch.cur != nil && w.matches(ch.cur)
		prev := ch.prev != nil && w.matches(ch.prev)
		switch {
		case cur && prev:
			out = append(out, observe(watch.Modified, ch.cur))
		case cur:
			out = append(out, observe(watch.Added, ch.cur))
		case prev:
			out = append(out, observe(watch.Deleted, ch.prev))
		}
	}
	return out
}

// diffEvents shows got and want around their first difference, marking
// the rows that differ.
func diffEvents(got, want []observed) string {
	n := max(len(got), len(want))
	row := func(s []observed, i int) string {
		if i < len(s) {
			return s[i].String()
		}
		return "(none)"
	}
	first := 0
	for first < n && row(got, first) == row(want, first) {
		first++
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d events, want %d; first difference at %d\n", len(got), len(want), first)
	for i := max(0, first-3); i < min(n, first+10); i++ {
		g, w := row(got, i), row(want, i)
		mark := " "
		if g != w {
			mark = "!"
		}
		fmt.Fprintf(&b, "%s %3d got  %s\n      want %s\n", mark, i, g, w)
	}
	return b.String()
}
