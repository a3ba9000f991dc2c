package namespace

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/resources"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage/storagetest"
	"google.golang.org/genproto/googleapis/api/httpbody"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var _ Objects = (*resources.Server)(nil)

// env is the API (resources.Server) over a real single-member store, and
// a Controller over both.
type env struct {
	t     *testing.T
	api   *resources.Server
	store *storage.Store
	codec *codec.Codec
	reg   *registry.Registry
	c     *Controller
}

func newEnv(t *testing.T) *env {
	t.Helper()
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, store: storagetest.Start(t), codec: c, reg: registry.New(registry.Standard()...)}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if e.api, err = resources.New(resources.Config{Registry: e.reg, Codec: c, Store: e.store, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	if e.c, err = New(Config{Registry: e.reg, Codec: c, Store: e.store, Objects: e.api, Logger: quiet, Interval: 10 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	return e
}

func ref(resource, ns, name string) *apiv1.ResourceRef {
	return &apiv1.ResourceRef{Version: "v1", Resource: resource, Namespace: ns, Name: name}
}

func (e *env) create(resource, ns, body string) {
	e.t.Helper()
	if _, err := e.api.Create(e.t.Context(), &apiv1.CreateRequest{Ref: ref(resource, ns, ""), Body: &httpbody.HttpBody{ContentType: negotiation.JSON, Data: []byte(body)}}); err != nil {
		e.t.Fatalf("create %s: %v", body, err)
	}
}

func (e *env) delete(resource, ns, name string) {
	e.t.Helper()
	if _, err := e.api.Delete(e.t.Context(), &apiv1.DeleteRequest{Ref: ref(resource, ns, name)}); err != nil {
		e.t.Fatalf("delete %s %s/%s: %v", resource, ns, name, err)
	}
}

// exists reports whether the store holds the object.
func (e *env) exists(resource, ns, name string) bool {
	e.t.Helper()
	res, _ := e.reg.Lookup(schema.GroupVersionResource{Version: "v1", Resource: resource})
	_, _, err := e.store.Get(e.t.Context(), res.Key(ns, name), storage.ReadOptions{})
	if err != nil && err != storage.ErrNotFound {
		e.t.Fatal(err)
	}
	return err == nil
}

// reconcile runs the controller's rounds until one changes nothing.
func (e *env) reconcile() {
	e.t.Helper()
	ctx := e.t.Context()
	for range 8 {
		before, err := e.store.Revision(ctx, false)
		if err != nil {
			e.t.Fatal(err)
		}
		if err := e.c.reconcile(ctx); err != nil {
			e.t.Fatal(err)
		}
		if after, _ := e.store.Revision(ctx, false); after == before {
			return
		}
	}
	e.t.Fatal("the controller did not settle")
}

// TestNamespaceLifecycle: a namespace being deleted is emptied, then loses
// its finalizer and goes; an object with finalizers holds it until they
// are gone; other namespaces, and what they hold, are left alone.
func TestNamespaceLifecycle(t *testing.T) {
	e := newEnv(t)
	for _, ns := range []string{"doomed", "held", "kept"} {
		e.create("namespaces", "", `{"metadata":{"name":"`+ns+`"}}`)
		e.create("configmaps", ns, `{"metadata":{"name":"a"}}`)
		e.create("secrets", ns, `{"metadata":{"name":"s"}}`)
	}
	e.create("configmaps", "held", `{"metadata":{"name":"holder","finalizers":["example.com/hold"]}}`)
	e.delete("namespaces", "", "doomed")
	e.delete("namespaces", "", "held")

	e.reconcile()
	for _, c := range []struct {
		resource, ns, name string
		exists             bool
	}{
		{"namespaces", "", "doomed", false},
		{"configmaps", "doomed", "a", false},
		{"secrets", "doomed", "s", false},
		{"namespaces", "", "held", true},
		{"configmaps", "held", "a", false},
		{"configmaps", "held", "holder", true},
		{"namespaces", "", "kept", true},
		{"configmaps", "kept", "a", true},
		{"secrets", "kept", "s", true},
	} {
		if got := e.exists(c.resource, c.ns, c.name); got != c.exists {
			t.Errorf("%s %s/%s exists: %t, want %t", c.resource, c.ns, c.name, got, c.exists)
		}
	}

	// The holder, marked for deletion, goes with its last finalizer; the
	// namespace follows.
	if _, err := e.api.Update(t.Context(), &apiv1.UpdateRequest{Ref: ref("configmaps", "held", "holder"),
		Body: &httpbody.HttpBody{ContentType: negotiation.JSON, Data: []byte(`{"metadata":{"name":"holder","finalizers":[]}}`)}}); err != nil {
		t.Fatal(err)
	}
	e.reconcile()
	if e.exists("namespaces", "", "held") {
		t.Error("an emptied namespace was not removed")
	}
}

// TestNamespaceWithoutItsFinalizer: a namespace being deleted that no
// longer has the "kubernetes" finalizer is not the controller's (it waits
// for other finalizers): what it holds stays.
func TestNamespaceWithoutItsFinalizer(t *testing.T) {
	e := newEnv(t)
	e.create("namespaces", "", `{"metadata":{"name":"other","finalizers":["example.com/hold"]}}`)
	e.create("configmaps", "other", `{"metadata":{"name":"a"}}`)
	e.delete("namespaces", "", "other")
	// Take the spec finalizer away, as another controller finalizing it
	// would; the metadata finalizer keeps the namespace.
	finalize := &apiv1.ResourceRef{Version: "v1", Resource: "namespaces", Name: "other", Subresource: "finalize"}
	if _, err := e.api.UpdateObject(t.Context(), e.c.ns, finalize, func(old runtime.Object) (runtime.Object, error) {
		ns := old.DeepCopyObject().(*corev1.Namespace)
		ns.Spec.Finalizers = nil
		return ns, nil
	}); err != nil {
		t.Fatal(err)
	}
	e.reconcile()
	if !e.exists("namespaces", "", "other") || !e.exists("configmaps", "other", "a") {
		t.Error("the controller acted on a namespace without its finalizer")
	}
}

// TestRun: Run takes a deleted namespace to its end.
func TestRun(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); e.c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	e.create("namespaces", "", `{"metadata":{"name":"doomed"}}`)
	e.create("configmaps", "doomed", `{"metadata":{"name":"a"}}`)
	e.delete("namespaces", "", "doomed")
	deadline := time.Now().Add(20 * time.Second)
	for e.exists("namespaces", "", "doomed") {
		if time.Now().After(deadline) {
			t.Fatal("the namespace is still there after 20 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if e.exists("configmaps", "doomed", "a") {
		t.Error("the namespace went before what it held")
	}
}

// TestNewNeedsItsParts: New names every missing part.
func TestNewNeedsItsParts(t *testing.T) {
	_, err := New(Config{})
	want := "namespace: a Registry is required\nnamespace: a Codec is required\nnamespace: a Store is required\nnamespace: Objects are required"
	if err == nil || err.Error() != want {
		t.Errorf("New(Config{}) = %v, want %q", err, want)
	}
	_, err = New(Config{Registry: registry.New(), Codec: &codec.Codec{}, Store: &storage.Store{}, Objects: &resources.Server{}})
	if err == nil || err.Error() != "namespace: the Registry does not serve namespaces" {
		t.Errorf("a registry without namespaces: %v", err)
	}
}
