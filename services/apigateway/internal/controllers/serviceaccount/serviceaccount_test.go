package serviceaccount

import (
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/polltest"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/nsobject"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/reconcile/reconciletest"
	"github.com/meridian-cp/meridian/services/apigateway/internal/resources"
	"github.com/meridian-cp/meridian/services/apigateway/internal/resources/resourcestest"
)

var _ nsobject.Objects = (*resources.Server)(nil)

// TestDefaultServiceAccount, against a real store and the API's own
// writes: a namespace that existed before the controller started and one
// created after both get "default"; a deleted "default" comes back; in a
// namespace being deleted it does not.
func TestDefaultServiceAccount(t *testing.T) {
	api := resourcestest.Start(t)
	api.Namespace("before")
	c, err := New(nsobject.Config{Registry: api.Registry, Codec: api.Codec, Store: api.Store, Objects: api.Server, Logger: api.Logger, Retry: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	reconciletest.Run(t, c.Run)

	has := func(ns string) func() bool {
		return func() bool { return api.Stored("serviceaccounts", ns, DefaultName) != nil }
	}
	polltest.Until(t, 30*time.Second, "default in the namespace made before the start", has("before"))
	api.Namespace("after")
	polltest.Until(t, 30*time.Second, "default in a new namespace", has("after"))
	if sa := api.Stored("serviceaccounts", "after", DefaultName); sa.GetNamespace() != "after" {
		t.Errorf("stored %s/%s", sa.GetNamespace(), sa.GetName())
	}
	api.Delete("serviceaccounts", "after", DefaultName, "")
	polltest.Until(t, 30*time.Second, "default re-created", has("after"))

	// "before" is being deleted (its finalizer holds it: no namespace
	// controller runs here): its default, deleted, stays away. Once the
	// controller re-created "after"'s default, deleted after it, it has
	// seen this delete too (one watch, in order).
	api.Delete("namespaces", "", "before", "")
	api.Delete("serviceaccounts", "before", DefaultName, "")
	api.Delete("serviceaccounts", "after", DefaultName, "")
	polltest.Until(t, 30*time.Second, "default re-created again", has("after"))
	if has("before")() {
		t.Error("default re-created in a namespace being deleted")
	}
}
