package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/internal/allinone"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// next returns the next event of w, failing after a timeout.
func next(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch closed")
		}
		return ev
	case <-time.After(20 * time.Second):
		t.Fatal("no watch event within 20s")
	}
	return watch.Event{}
}

func nameOf(ev watch.Event) string {
	if cm, ok := ev.Object.(*corev1.ConfigMap); ok {
		return cm.Name
	}
	return fmt.Sprintf("<%T>", ev.Object)
}

// TestWatchSemantics checks the rows of the watch table, served by
// watchfanout and, as when watchfanout is down, by the store.
func TestWatchSemantics(t *testing.T) {
	t.Run("watchfanout", func(t *testing.T) {
		watchSemantics(t, newEnv(t, func(c *allinone.Config) {
			c.Watchfanout = allinone.WatchfanoutConfig{BookmarkInterval: time.Second, HistoryMaxEvents: 10}
		}), true)
	})
	t.Run("store", func(t *testing.T) {
		watchSemantics(t, newEnv(t, func(c *allinone.Config) { c.DisableWatchfanout = true }), false)
	})
}

func watchSemantics(t *testing.T, e *env, watchfanout bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cms := e.client.CoreV1().ConfigMaps("default")
	a, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"app": "x"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("unset: state, then changes", func(t *testing.T) {
		w, err := cms.Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		// a, b and default's kube-root-ca.crt.
		got := map[string]watch.EventType{}
		for len(got) < 3 {
			ev := next(t, w)
			got[nameOf(ev)] = ev.Type
		}
		if got["a"] != watch.Added || got["b"] != watch.Added || got[rootCA] != watch.Added {
			t.Errorf("initial events %v", got)
		}
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if ev := next(t, w); ev.Type != watch.Added || nameOf(ev) != "c" {
			t.Errorf("then %s %s", ev.Type, nameOf(ev))
		}
	})

	t.Run("N: the changes after N", func(t *testing.T) {
		w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: a.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if ev := next(t, w); ev.Type != watch.Added || nameOf(ev) != "b" || ev.Object.(*corev1.ConfigMap).ResourceVersion != b.ResourceVersion {
			t.Errorf("first event after %s: %s %s", a.ResourceVersion, ev.Type, nameOf(ev))
		}
	})

	t.Run("selector transitions", func(t *testing.T) {
		w, err := cms.Watch(ctx, metav1.ListOptions{LabelSelector: "app=x", ResourceVersion: b.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		cur, err := cms.Get(ctx, "a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Labels = map[string]string{"app": "y"}
		if cur, err = cms.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if ev := next(t, w); ev.Type != watch.Deleted || nameOf(ev) != "a" {
			t.Errorf("leaving the selector: %s %s, want DELETED a", ev.Type, nameOf(ev))
		}
		cur.Labels = map[string]string{"app": "x"}
		if _, err = cms.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if ev := next(t, w); ev.Type != watch.Added || nameOf(ev) != "a" {
			t.Errorf("entering the selector: %s %s, want ADDED a", ev.Type, nameOf(ev))
		}
	})

	t.Run("sendInitialEvents: ADDED, then the initial-events-end bookmark", func(t *testing.T) {
		yes := true
		w, err := cms.Watch(ctx, metav1.ListOptions{SendInitialEvents: &yes, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		added := 0
		for {
			ev := next(t, w)
			if ev.Type == watch.Bookmark {
				cm := ev.Object.(*corev1.ConfigMap)
				if cm.Annotations[metav1.InitialEventsAnnotationKey] != "true" || cm.ResourceVersion == "" {
					t.Errorf("bookmark %+v", cm.ObjectMeta)
				}
				break
			}
			if ev.Type != watch.Added {
				t.Fatalf("initial event %s", ev.Type)
			}
			added++
		}
		if added != 4 {
			t.Errorf("%d initial events, want 4 (a, b, c and %s)", added, rootCA)
		}
	})

	t.Run("sendInitialEvents without NotOlderThan: 400", func(t *testing.T) {
		yes := true
		_, err := cms.Watch(ctx, metav1.ListOptions{SendInitialEvents: &yes, AllowWatchBookmarks: true})
		if !apierrors.IsBadRequest(err) {
			t.Errorf("got %v, want 400", err)
		}
	})

	t.Run("periodic bookmarks", func(t *testing.T) {
		w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: "1", AllowWatchBookmarks: true, LabelSelector: "none=match"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if ev := next(t, w); ev.Type != watch.Bookmark {
			t.Errorf("got %s, want a BOOKMARK", ev.Type)
		}
	})

	t.Run("N older than the history: 410 Expired as an ERROR event", func(t *testing.T) {
		if watchfanout {
			// watchfanout keeps its own history (here 10 events), like
			// kube-apiserver's watch cache: push a's revision out of it.
			for i := 0; i < 15; i++ {
				if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("fill-%d", i)}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		} else {
			e.compact(ctx)
		}
		w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: a.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		ev := next(t, w)
		st, ok := ev.Object.(*metav1.Status)
		if ev.Type != watch.Error || !ok || st.Code != 410 || st.Reason != metav1.StatusReasonExpired {
			t.Errorf("got %s %+v, want ERROR 410 Expired", ev.Type, ev.Object)
		}
	})
}

// watchListGates switches client-go's WatchListClient feature.
type watchListGates struct{ on bool }

func (g watchListGates) Enabled(k clientfeatures.Feature) bool {
	if k == clientfeatures.WatchListClient {
		return g.on
	}
	return false
}

// TestInformers runs client-go shared informers against the gateway, with
// the classic list+watch and with WatchList (sendInitialEvents).
func TestInformers(t *testing.T) {
	e := newEnv(t)
	for _, watchList := range []bool{false, true} {
		t.Run(fmt.Sprintf("WatchListClient=%v", watchList), func(t *testing.T) {
			clientfeatures.ReplaceFeatureGates(watchListGates{on: watchList})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			ns := fmt.Sprintf("inf-%v", watchList)
			e.createNamespace(ns)
			cms := e.client.CoreV1().ConfigMaps(ns)
			for i := 0; i < 20; i++ {
				if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pre-%d", i)}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			f := informers.NewSharedInformerFactoryWithOptions(e.client, 0, informers.WithNamespace(ns))
			inf := f.Core().V1().ConfigMaps().Informer()
			var mu sync.Mutex
			seen := map[string]string{}
			deleted := map[string]bool{}
			_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
				AddFunc: func(o any) {
					mu.Lock()
					seen[o.(*corev1.ConfigMap).Name] = o.(*corev1.ConfigMap).Data["v"]
					mu.Unlock()
				},
				UpdateFunc: func(_, o any) {
					mu.Lock()
					seen[o.(*corev1.ConfigMap).Name] = o.(*corev1.ConfigMap).Data["v"]
					mu.Unlock()
				},
				DeleteFunc: func(o any) {
					if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
						o = d.Obj
					}
					mu.Lock()
					deleted[o.(*corev1.ConfigMap).Name] = true
					mu.Unlock()
				},
			})
			f.Start(ctx.Done())
			if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
				t.Fatal("informer never synced")
			}
			if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "later"}, Data: map[string]string{"v": "1"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := cms.Delete(ctx, "pre-0", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
				mu.Lock()
				defer mu.Unlock()
				// pre-*, later and the namespace's kube-root-ca.crt.
				return len(seen) == 22 && seen["later"] == "1" && deleted["pre-0"], nil
			})
			if err != nil {
				mu.Lock()
				t.Fatalf("informer saw %d objects, deleted %v", len(seen), deleted)
			}
			if n := len(inf.GetStore().List()); n != 21 {
				t.Errorf("informer cache holds %d objects, want 21", n)
			}
			cancel()
			f.Shutdown()
		})
	}
}
