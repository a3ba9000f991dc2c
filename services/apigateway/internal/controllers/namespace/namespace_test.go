package namespace

import (
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/polltest"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/reconcile/reconciletest"
	"github.com/meridian-cp/meridian/services/apigateway/internal/resources"
	"github.com/meridian-cp/meridian/services/apigateway/internal/resources/resourcestest"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

var _ Objects = (*resources.Server)(nil)

// env is the API over a real single-member store, and a Controller over
// both.
type env struct {
	*resourcestest.API
	c *Controller
}

func newEnv(t *testing.T) *env {
	t.Helper()
	api := resourcestest.Start(t)
	c, err := New(Config{Registry: api.Registry, Codec: api.Codec, Store: api.Store, Objects: api.Server, Logger: api.Logger, Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return &env{API: api, c: c}
}

// exists reports whether the store holds the object.
func (e *env) exists(resource, ns, name string) bool { return e.Stored(resource, ns, name) != nil }

// reconcile runs the controller's rounds until one changes nothing.
func (e *env) reconcile(t *testing.T) {
	t.Helper()
	for range 8 {
		before := e.Revision()
		if err := e.c.reconcile(t.Context()); err != nil {
			t.Fatal(err)
		}
		if e.Revision() == before {
			return
		}
	}
	t.Fatal("the controller did not settle")
}

// TestNamespaceLifecycle: a namespace being deleted is emptied, then loses
// its finalizer and goes; an object with finalizers holds it until they
// are gone; other namespaces, and what they hold, are left alone.
func TestNamespaceLifecycle(t *testing.T) {
	e := newEnv(t)
	for _, ns := range []string{"doomed", "held", "kept"} {
		e.Create("namespaces", "", `{"metadata":{"name":"`+ns+`"}}`)
		e.Create("configmaps", ns, `{"metadata":{"name":"a"}}`)
		e.Create("secrets", ns, `{"metadata":{"name":"s"}}`)
	}
	e.Create("configmaps", "held", `{"metadata":{"name":"holder","finalizers":["example.com/hold"]}}`)
	e.Delete("namespaces", "", "doomed", "")
	e.Delete("namespaces", "", "held", "")

	e.reconcile(t)
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
	e.Update("configmaps", "held", "holder", `{"metadata":{"name":"holder","finalizers":[]}}`)
	e.reconcile(t)
	if e.exists("namespaces", "", "held") {
		t.Error("an emptied namespace was not removed")
	}
}

// TestNamespaceWithoutItsFinalizer: a namespace being deleted that no
// longer has the "kubernetes" finalizer is not the controller's (it waits
// for other finalizers): what it holds stays.
func TestNamespaceWithoutItsFinalizer(t *testing.T) {
	e := newEnv(t)
	e.Create("namespaces", "", `{"metadata":{"name":"other","finalizers":["example.com/hold"]}}`)
	e.Create("configmaps", "other", `{"metadata":{"name":"a"}}`)
	e.Delete("namespaces", "", "other", "")
	// Take the spec finalizer away, as another controller finalizing it
	// would; the metadata finalizer keeps the namespace.
	finalize := &apiv1.ResourceRef{Version: "v1", Resource: "namespaces", Name: "other", Subresource: "finalize"}
	if _, err := e.Server.UpdateObject(t.Context(), e.c.ns, finalize, func(old runtime.Object) (runtime.Object, error) {
		ns := old.DeepCopyObject().(*corev1.Namespace)
		ns.Spec.Finalizers = nil
		return ns, nil
	}); err != nil {
		t.Fatal(err)
	}
	e.reconcile(t)
	if !e.exists("namespaces", "", "other") || !e.exists("configmaps", "other", "a") {
		t.Error("the controller acted on a namespace without its finalizer")
	}
}

// TestRun: Run takes a deleted namespace to its end.
func TestRun(t *testing.T) {
	e := newEnv(t)
	reconciletest.Run(t, e.c.Run)

	e.Create("namespaces", "", `{"metadata":{"name":"doomed"}}`)
	e.Create("configmaps", "doomed", `{"metadata":{"name":"a"}}`)
	e.Delete("namespaces", "", "doomed", "")
	polltest.Until(t, 20*time.Second, "the namespace to go", func() bool { return !e.exists("namespaces", "", "doomed") })
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
