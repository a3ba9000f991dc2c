package gc

import (
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/polltest"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/reconcile/reconciletest"
	"github.com/meridian-cp/meridian/services/apigateway/internal/resources"
	"github.com/meridian-cp/meridian/services/apigateway/internal/resources/resourcestest"
	"google.golang.org/genproto/googleapis/api/httpbody"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var (
	_ Objects        = (*resources.Server)(nil)
	_ ChangeObserver = (*resources.Server)(nil)
)

// env is the API over a real single-member store, and the Config of a
// Collector over both.
type env struct {
	*resourcestest.API
	cfg Config
}

func newEnv(t *testing.T) *env {
	t.Helper()
	api := resourcestest.Start(t)
	return &env{API: api, cfg: Config{Registry: api.Registry, Store: api.Store, Objects: api.Server, Observer: api.Server, Logger: api.Logger}}
}

// collect runs the collector's rounds without its watch: each rebuilds
// the graph from the store and acts on every object in it, until a round
// changes nothing.
func (e *env) collect(t *testing.T) {
	t.Helper()
	c, err := New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	cs := &collector{Collector: c}
	for range 8 {
		before := e.Revision()
		if _, err := cs.resync(t.Context()); err != nil {
			t.Fatal(err)
		}
		cs.reconcile(t.Context())
		if len(cs.g.failed) > 0 {
			t.Fatalf("actions failed: %v", cs.g.failed)
		}
		if e.Revision() == before {
			return
		}
	}
	t.Fatal("the collector did not settle")
}

// ownerRef is an owner reference in JSON.
func ownerRef(apiVersion, kind, name string, uid any) string {
	return `{"apiVersion":"` + apiVersion + `","kind":"` + kind + `","name":"` + name + `","uid":"` + uidOf(uid) + `"}`
}

func uidOf(v any) string {
	if acc, ok := v.(metav1.Object); ok {
		return string(acc.GetUID())
	}
	return v.(string)
}

// TestCollectionRules: which dependents the collector deletes, and how it
// carries out foreground and orphan deletion of their owners.
func TestCollectionRules(t *testing.T) {
	e := newEnv(t)
	type state struct {
		resource, ns, name string
		// exists, and then: finalizers, owner uids, being deleted.
		exists     bool
		finalizers []string
		owners     int
		deleting   bool
	}
	for i, c := range []struct {
		name string
		// setup creates the case's objects in namespace ns and returns
		// the state they must reach.
		setup func(ns string) []state
	}{
		{"a dependent whose owner exists stays", func(ns string) []state {
			o := e.Create("configmaps", ns, `{"metadata":{"name":"owner"}}`)
			e.Create("configmaps", ns, `{"metadata":{"name":"dep","ownerReferences":[`+ownerRef("v1", "ConfigMap", "owner", o)+`]}}`)
			return []state{{"configmaps", ns, "owner", true, nil, 0, false}, {"configmaps", ns, "dep", true, nil, 1, false}}
		}},
		{"a dependent whose owner is gone goes", func(ns string) []state {
			o := e.Create("configmaps", ns, `{"metadata":{"name":"owner"}}`)
			e.Create("configmaps", ns, `{"metadata":{"name":"dep","ownerReferences":[`+ownerRef("v1", "ConfigMap", "owner", o)+`]}}`)
			e.Create("configmaps", ns, `{"metadata":{"name":"dep2","ownerReferences":[`+ownerRef("v1", "ConfigMap", "never", "never-uid")+`]}}`)
			e.Delete("configmaps", ns, "owner", "")
			return []state{{resource: "configmaps", ns: ns, name: "dep"}, {resource: "configmaps", ns: ns, name: "dep2"}}
		}},
		{"an owner of the same name with another uid is not the owner", func(ns string) []state {
			e.Create("configmaps", ns, `{"metadata":{"name":"owner"}}`)
			e.Create("configmaps", ns, `{"metadata":{"name":"dep","ownerReferences":[`+ownerRef("v1", "ConfigMap", "owner", "an-earlier-owner")+`]}}`)
			return []state{{"configmaps", ns, "owner", true, nil, 0, false}, {resource: "configmaps", ns: ns, name: "dep"}}
		}},
		{"one owner left is enough", func(ns string) []state {
			o := e.Create("configmaps", ns, `{"metadata":{"name":"owner"}}`)
			e.Create("configmaps", ns, `{"metadata":{"name":"dep","ownerReferences":[`+ownerRef("v1", "ConfigMap", "gone", "gone-uid")+`,`+ownerRef("v1", "ConfigMap", "owner", o)+`]}}`)
			return []state{{"configmaps", ns, "dep", true, nil, 2, false}}
		}},
		{"an owner in another namespace is not an owner", func(ns string) []state {
			e.Namespace(ns + "-b")
			o := e.Create("configmaps", ns+"-b", `{"metadata":{"name":"owner"}}`)
			e.Create("configmaps", ns, `{"metadata":{"name":"dep","ownerReferences":[`+ownerRef("v1", "ConfigMap", "owner", o)+`]}}`)
			return []state{{"configmaps", ns + "-b", "owner", true, nil, 0, false}, {resource: "configmaps", ns: ns, name: "dep"}}
		}},
		{"a cluster-scoped owner of a namespaced dependent", func(ns string) []state {
			nsObj := e.Stored("namespaces", "", ns)
			e.Create("configmaps", ns, `{"metadata":{"name":"dep","ownerReferences":[`+ownerRef("v1", "Namespace", ns, nsObj)+`]}}`)
			return []state{{"configmaps", ns, "dep", true, nil, 1, false}}
		}},
		{"an owner of a kind not served is never resolved", func(ns string) []state {
			e.Create("configmaps", ns, `{"metadata":{"name":"dep","ownerReferences":[`+ownerRef("example.com/v1", "Widget", "w", "widget-uid")+`]}}`)
			return []state{{"configmaps", ns, "dep", true, nil, 1, false}}
		}},
		{"a namespaced owner of a cluster-scoped dependent is never resolved", func(ns string) []state {
			e.Create("namespaces", "", `{"metadata":{"name":"`+ns+`-dep","ownerReferences":[`+ownerRef("v1", "ConfigMap", "owner", "cm-uid")+`]}}`)
			return []state{{"namespaces", "", ns + "-dep", true, []string{}, 1, false}}
		}},
		{"foreground: the dependents first, then the owner", func(ns string) []state {
			o := e.Create("configmaps", ns, `{"metadata":{"name":"owner"}}`)
			for _, d := range []string{"d1", "d2"} {
				e.Create("configmaps", ns, `{"metadata":{"name":"`+d+`","ownerReferences":[`+ownerRef("v1", "ConfigMap", "owner", o)+`]}}`)
			}
			e.Delete("configmaps", ns, "owner", "Foreground")
			return []state{{resource: "configmaps", ns: ns, name: "owner"}, {resource: "configmaps", ns: ns, name: "d1"}, {resource: "configmaps", ns: ns, name: "d2"}}
		}},
		{"foreground waits for a dependent held by a finalizer", func(ns string) []state {
			o := e.Create("configmaps", ns, `{"metadata":{"name":"owner"}}`)
			e.Create("configmaps", ns, `{"metadata":{"name":"held","finalizers":["example.com/hold"],"ownerReferences":[`+ownerRef("v1", "ConfigMap", "owner", o)+`]}}`)
			e.Delete("configmaps", ns, "owner", "Foreground")
			return []state{
				{"configmaps", ns, "owner", true, []string{metav1.FinalizerDeleteDependents}, 0, true},
				{"configmaps", ns, "held", true, []string{"example.com/hold"}, 1, true},
			}
		}},
		{"orphan: the dependents lose the reference, then the owner goes", func(ns string) []state {
			o := e.Create("configmaps", ns, `{"metadata":{"name":"owner"}}`)
			other := e.Create("configmaps", ns, `{"metadata":{"name":"other"}}`)
			e.Create("configmaps", ns, `{"metadata":{"name":"dep","ownerReferences":[`+ownerRef("v1", "ConfigMap", "owner", o)+`,`+ownerRef("v1", "ConfigMap", "other", other)+`]}}`)
			e.Delete("configmaps", ns, "owner", "Orphan")
			return []state{{resource: "configmaps", ns: ns, name: "owner"}, {"configmaps", ns, "dep", true, nil, 1, false}}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := "case" + strconv.Itoa(i)
			e.Namespace(ns)
			want := c.setup(ns)
			e.collect(t)
			for _, w := range want {
				got := e.Stored(w.resource, w.ns, w.name)
				switch {
				case got == nil && w.exists:
					t.Errorf("%s %s/%s was deleted", w.resource, w.ns, w.name)
				case got != nil && !w.exists:
					t.Errorf("%s %s/%s was not deleted", w.resource, w.ns, w.name)
				case got == nil:
				case w.finalizers != nil && !slices.Equal(got.GetFinalizers(), w.finalizers),
					len(got.GetOwnerReferences()) != w.owners,
					(got.GetDeletionTimestamp() != nil) != w.deleting:
					t.Errorf("%s %s/%s: finalizers %v, %d owners, deleting %t; want %v, %d, %t", w.resource, w.ns, w.name,
						got.GetFinalizers(), len(got.GetOwnerReferences()), got.GetDeletionTimestamp() != nil, w.finalizers, w.owners, w.deleting)
				}
			}
		})
	}
}

// observer records what the collector tells the API's update hints.
type observer struct {
	ChangeObserver
	mu      sync.Mutex
	keys    []string
	resyncs int
}

func (o *observer) ObserveChange(key string, modRevision int64) {
	o.mu.Lock()
	o.keys = append(o.keys, key)
	o.mu.Unlock()
	o.ChangeObserver.ObserveChange(key, modRevision)
}

func (o *observer) ObserveResync() {
	o.mu.Lock()
	o.resyncs++
	o.mu.Unlock()
	o.ChangeObserver.ObserveResync()
}

func (o *observer) saw(key string) (bool, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Contains(o.keys, key), o.resyncs
}

// TestRunFollowsTheStore: Run builds its view, then follows the store's
// watch: a dependent whose owner goes while it runs is collected, and the
// changes it sees are passed on to the observer.
func TestRunFollowsTheStore(t *testing.T) {
	e := newEnv(t)
	obs := &observer{ChangeObserver: e.Server}
	e.cfg.Observer = obs
	c, err := New(e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	reconciletest.Run(t, c.Run)

	e.Namespace("ns")
	o := e.Create("configmaps", "ns", `{"metadata":{"name":"owner"}}`)
	e.Create("configmaps", "ns", `{"metadata":{"name":"dep","ownerReferences":[`+ownerRef("v1", "ConfigMap", "owner", o)+`]}}`)
	e.Delete("configmaps", "ns", "owner", "")
	polltest.Until(t, 20*time.Second, "the dependent to be collected", func() bool { return e.Stored("configmaps", "ns", "dep") == nil })
	// The collector deletes the dependent after its watch started, so the
	// watch sees the deletion.
	polltest.Until(t, 20*time.Second, "the observer to see the deletion", func() bool { seen, _ := obs.saw("/registry/configmaps/ns/dep"); return seen })
	if _, resyncs := obs.saw(""); resyncs == 0 {
		t.Error("the observer was not told of the resync")
	}
}

// TestResyncReadsEveryPage: the list that rebuilds the collector's view
// reads past its first page.
func TestResyncReadsEveryPage(t *testing.T) {
	e := newEnv(t)
	e.Namespace("ns")
	names := make(chan string)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				body := `{"metadata":{"name":"` + name + `"}}`
				if _, err := e.Server.Create(t.Context(), &apiv1.CreateRequest{Ref: resourcestest.Ref("configmaps", "ns", ""), Body: &httpbody.HttpBody{ContentType: negotiation.JSON, Data: []byte(body)}}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	for i := range listPage {
		names <- fmt.Sprintf("a-%04d", i)
	}
	close(names)
	wg.Wait()
	// After a page of other keys: collected only if the list reads on.
	e.Create("configmaps", "ns", `{"metadata":{"name":"z-dep","ownerReferences":[`+ownerRef("v1", "ConfigMap", "never", "never-uid")+`]}}`)
	e.collect(t)
	if e.Stored("configmaps", "ns", "z-dep") != nil {
		t.Error("a dependent on the second page of the list was not collected")
	}
}

// TestNewNeedsItsParts: New names every missing part.
func TestNewNeedsItsParts(t *testing.T) {
	_, err := New(Config{})
	want := "gc: a Registry is required\ngc: a Store is required\ngc: Objects are required"
	if err == nil || err.Error() != want {
		t.Errorf("New(Config{}) = %v, want %q", err, want)
	}
}
