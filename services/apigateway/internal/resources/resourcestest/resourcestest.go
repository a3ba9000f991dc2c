// Package resourcestest runs the gateway's API (resources.Server) over a
// real store member in process, for the tests of what writes through the
// API (the gateway's controllers). Its helpers fail the test on an error.
package resourcestest

import (
	"io"
	"log/slog"
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/resources"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage/storagetest"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// API is a resources.Server over a single-member store, serving every
// standard kind, with what it was built from.
type API struct {
	Server   *resources.Server
	Store    *storage.Store
	Codec    *codec.Codec
	Registry *registry.Registry
	// Logger discards what it is given.
	Logger *slog.Logger
	t      testing.TB
}

// Start starts a store (storagetest.Start) and an API over it; both end
// when the test ends.
func Start(t testing.TB) *API {
	t.Helper()
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	a := &API{Store: storagetest.Start(t), Codec: c, Registry: registry.New(registry.Standard()...), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), t: t}
	if a.Server, err = resources.New(resources.Config{Registry: a.Registry, Codec: c, Store: a.Store, Logger: a.Logger}); err != nil {
		t.Fatal(err)
	}
	return a
}

// Ref names an object of a core (v1) resource, or ("" name) a collection.
func Ref(resource, ns, name string) *apiv1.ResourceRef {
	return &apiv1.ResourceRef{Version: "v1", Resource: resource, Namespace: ns, Name: name}
}

// Resource returns the core (v1) resource named resource.
func (a *API) Resource(resource string) *registry.Resource {
	a.t.Helper()
	res, ok := a.Registry.Lookup(schema.GroupVersionResource{Version: "v1", Resource: resource})
	if !ok {
		a.t.Fatalf("%s not served", resource)
	}
	return res
}

// Create creates an object of resource in namespace ns from a JSON body
// and returns its metadata as created.
func (a *API) Create(resource, ns, body string) metav1.Object {
	a.t.Helper()
	b, err := a.Server.Create(a.t.Context(), &apiv1.CreateRequest{Ref: Ref(resource, ns, ""), Body: jsonBody(body)})
	if err != nil {
		a.t.Fatalf("create %s: %v", body, err)
	}
	res := a.Resource(resource)
	obj := res.New()
	if err := a.Codec.Decode(b.GetData(), b.GetContentType(), res.GVK(), obj); err != nil {
		a.t.Fatal(err)
	}
	acc, _ := meta.Accessor(obj)
	return acc
}

// Update replaces an object with a JSON body.
func (a *API) Update(resource, ns, name, body string) {
	a.t.Helper()
	if _, err := a.Server.Update(a.t.Context(), &apiv1.UpdateRequest{Ref: Ref(resource, ns, name), Body: jsonBody(body)}); err != nil {
		a.t.Fatalf("update %s %s/%s: %v", resource, ns, name, err)
	}
}

// Delete deletes an object with a propagation policy ("": the default).
func (a *API) Delete(resource, ns, name, policy string) {
	a.t.Helper()
	if _, err := a.Server.Delete(a.t.Context(), &apiv1.DeleteRequest{Ref: Ref(resource, ns, name), PropagationPolicy: policy}); err != nil {
		a.t.Fatalf("delete %s %s/%s: %v", resource, ns, name, err)
	}
}

// Namespace creates namespace ns.
func (a *API) Namespace(ns string) {
	a.t.Helper()
	a.Create("namespaces", "", `{"metadata":{"name":"`+ns+`"}}`)
}

// Stored returns the metadata of the object the store holds; nil when it
// holds none.
func (a *API) Stored(resource, ns, name string) metav1.Object {
	a.t.Helper()
	obj := storagetest.Object(a.t, a.Store, a.Codec, a.Resource(resource), ns, name)
	if obj == nil {
		return nil
	}
	acc, _ := meta.Accessor(obj)
	return acc
}

// Revision returns the store's current revision: it moves with every
// write.
func (a *API) Revision() int64 { return storagetest.Revision(a.t, a.Store) }

func jsonBody(s string) *httpbody.HttpBody {
	return &httpbody.HttpBody{ContentType: negotiation.JSON, Data: []byte(s)}
}
