package integration

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meridian-cp/meridian/lib/telemetry/telemetrytest"
)

// TestConsistentListsFromWatchfanout: a consistent list (no resourceVersion),
// protobuf or JSON, is served by a watchfanout replica, which first
// reaches the store's current revision, so every list sees the write
// acknowledged just before it — whole, and as a first page with a limit.
// JSON and protobuf lists are relayed as watchfanout streams them
// (StreamList). Chunks after the first come from watchfanout too. With
// both replicas stopped the same lists are served by the store. The gateway counts each case in
// apiserver_watch_cache_consistent_read_total, as kube-apiserver does.
func TestConsistentListsFromWatchfanout(t *testing.T) {
	e := newReplicaEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	pb, js := clientWith(t, e.config, "application/vnd.kubernetes.protobuf"), clientWith(t, e.config, "application/json")
	replicaLists := func() float64 { return e.replicas[0].lists() + e.replicas[1].lists() }
	reads := func(success, fallback bool) float64 {
		return telemetrytest.Sum(t, e.gateway, "apiserver_watch_cache_consistent_read_total", map[string]string{
			"resource": "configmaps", "success": strconv.FormatBool(success), "fallback": strconv.FormatBool(fallback)})
	}
	// readsOwnWrite creates a ConfigMap and lists it back at once,
	// consistently, with c: whole, and as a one-item page found by name.
	readsOwnWrite := func(c kubernetes.Interface, name string) {
		t.Helper()
		cm, err := e.client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		written, _ := strconv.ParseInt(cm.ResourceVersion, 10, 64)
		for _, opts := range []metav1.ListOptions{{}, {Limit: 1, FieldSelector: "metadata.name=" + name}} {
			list, err := c.CoreV1().ConfigMaps("default").List(ctx, opts)
			if err != nil {
				t.Fatalf("list %+v: %v", opts, err)
			}
			if rv, _ := strconv.ParseInt(list.ResourceVersion, 10, 64); rv < written {
				t.Fatalf("list %+v after writing %s at %d: resourceVersion %d", opts, name, written, rv)
			}
			found := false
			for _, item := range list.Items {
				found = found || (item.Name == name && item.ResourceVersion == cm.ResourceVersion)
			}
			if !found {
				t.Fatalf("list %+v at %s does not hold %s written at %d", opts, list.ResourceVersion, name, written)
			}
		}
	}

	// Lists are relayed as watchfanout writes them (StreamList).
	streamed := func() float64 { return e.replicas[0].streamLists() + e.replicas[1].streamLists() }
	const n = 30
	streamed0 := streamed()
	for i := range n {
		readsOwnWrite(pb, fmt.Sprintf("pb-%d", i))
	}
	if got := streamed() - streamed0; got < 2*n {
		t.Errorf("the replicas streamed %v of %d consistent protobuf lists", got, 2*n)
	}
	if got := reads(true, false); got != 2*n {
		t.Errorf("consistent reads served by watchfanout: %v, want %d", got, 2*n)
	}

	streamed0 = streamed()
	for i := range n {
		readsOwnWrite(js, fmt.Sprintf("json-%d", i))
	}
	if got := streamed() - streamed0; got < 2*n {
		t.Errorf("the replicas streamed %v of %d consistent JSON lists", got, 2*n)
	}
	if got := reads(true, false); got != 4*n {
		t.Errorf("consistent reads served by watchfanout: %v, want %d", got, 4*n)
	}

	// Chunked lists: every chunk from watchfanout (the first chunk's kept
	// snapshot, or the store at its revision on the other replica), at the
	// first chunk's revision, together exactly the whole list.
	calls := replicaLists
	for enc, c := range map[string]kubernetes.Interface{"protobuf": pb, "json": js} {
		whole, err := c.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		calls0 := calls()
		var names []string
		pages := 0
		opts := metav1.ListOptions{Limit: 7}
		for {
			page, err := c.CoreV1().ConfigMaps("default").List(ctx, opts)
			if err != nil {
				t.Fatalf("%s chunk %d: %v", enc, pages, err)
			}
			pages++
			if page.ResourceVersion != whole.ResourceVersion {
				t.Errorf("%s chunk %d at %s, the list at %s", enc, pages, page.ResourceVersion, whole.ResourceVersion)
			}
			for _, it := range page.Items {
				names = append(names, it.Name)
			}
			if page.Continue == "" {
				break
			}
			opts.Continue = page.Continue
		}
		if got := calls() - calls0; got < float64(pages) {
			t.Errorf("%s: the replicas served %v of %d chunks", enc, got, pages)
		}
		if len(names) != len(whole.Items) {
			t.Fatalf("%s: chunks held %d objects, the list %d", enc, len(names), len(whole.Items))
		}
		for i, it := range whole.Items {
			if names[i] != it.Name {
				t.Fatalf("%s: chunks hold %s at %d, the list %s", enc, names[i], i, it.Name)
			}
		}
	}

	fromWatchfanout := reads(true, false) // the chunked lists' first chunks and whole lists too

	e.replicas[0].stop()
	e.replicas[1].stop()
	for i := range n {
		readsOwnWrite(pb, fmt.Sprintf("stopped-%d", i))
	}
	for i := range n {
		readsOwnWrite(js, fmt.Sprintf("stopped-json-%d", i))
	}
	if got := reads(false, true); got != 4*n {
		t.Errorf("consistent reads the store served with watchfanout stopped: %v, want %d", got, 4*n)
	}
	if got := reads(true, false); got != fromWatchfanout {
		t.Errorf("consistent reads served by watchfanout: %v, want still %v", got, fromWatchfanout)
	}
}
