// Package storagetest gives the gateway's tests a storage.Store over a
// real store member running in process (services/store/storetest): raft,
// pebble and gRPC on loopback, its data in a temporary directory of the
// test.
package storagetest

import (
	"errors"
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	storeapp "github.com/meridian-cp/meridian/services/store/app"
	"github.com/meridian-cp/meridian/services/store/storetest"
	"k8s.io/apimachinery/pkg/runtime"
)

// Start starts a single-member store and returns a Store over a plaintext
// connection to it. Both end when the test ends.
func Start(t testing.TB) *storage.Store {
	t.Helper()
	return storage.New(storetest.Start(t, storeapp.Config{ID: "store-0"}).Dial(t))
}

// Object reads the object of res named ns/name from s, decoded with c;
// nil when s does not hold it.
func Object(t testing.TB, s *storage.Store, c *codec.Codec, res *registry.Resource, ns, name string) runtime.Object {
	t.Helper()
	kv, _, err := s.Get(t.Context(), res.Key(ns, name), storage.ReadOptions{})
	if errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	obj := res.New()
	if err := c.DecodeStorage(kv.Value, kv.ModRevision, obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

// Revision returns the current revision of s: it moves with every write.
func Revision(t testing.TB, s *storage.Store) int64 {
	t.Helper()
	rev, err := s.Revision(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}
