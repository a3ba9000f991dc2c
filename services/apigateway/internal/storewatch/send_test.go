package storewatch_test

import (
	"context"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage/storagetest"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storewatch"
)

// TestSend, against a real store: the receiver gets the prefix's objects
// as one listed batch (a key outside the prefix left out), then each
// write as a watch batch, a delete with a nil Value, at the revisions the
// store gave them.
func TestSend(t *testing.T) {
	store := storagetest.Start(t)
	ctx := t.Context()
	const prefix = "/registry/widgets/"
	create := func(key, value string) int64 {
		t.Helper()
		rev, err := store.Create(ctx, key, []byte(value), storage.Parent{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		return rev
	}
	revA := create(prefix+"a", "A")
	create("/registry/gadgets/x", "X")

	ctx, cancel := context.WithCancel(ctx)
	out := make(chan storewatch.Batch)
	done := make(chan struct{})
	go func() {
		defer close(done)
		storewatch.Send(ctx, storewatch.Config{Store: store, Prefix: prefix, What: "widgets"}, out)
	}()
	defer func() { cancel(); <-done }()
	next := func() storewatch.Batch {
		t.Helper()
		select {
		case b := <-out:
			return b
		case <-time.After(30 * time.Second):
			t.Fatal("no batch")
			return storewatch.Batch{}
		}
	}

	b := next()
	if !b.Listed || b.Prefix != prefix || b.Revision < revA || len(b.Changes) != 1 || b.Changes[0].Key != prefix+"a" || string(b.Changes[0].Value) != "A" || b.Changes[0].Revision != revA {
		t.Fatalf("list: %+v", b)
	}
	revB := create(prefix+"b", "B")
	b = next()
	if b.Listed || b.Revision != revB || len(b.Changes) != 1 || b.Changes[0].Key != prefix+"b" || string(b.Changes[0].Value) != "B" || b.Changes[0].Revision != revB {
		t.Fatalf("create: %+v", b)
	}
	revDel, err := store.Delete(ctx, prefix+"a", revA)
	if err != nil {
		t.Fatal(err)
	}
	b = next()
	if b.Listed || b.Revision != revDel || len(b.Changes) != 1 || b.Changes[0].Key != prefix+"a" || b.Changes[0].Value != nil {
		t.Fatalf("delete: %+v", b)
	}
}
