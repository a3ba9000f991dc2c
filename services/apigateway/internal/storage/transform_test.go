package storage_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/storagecrypt"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	storeapp "github.com/meridian-cp/meridian/services/store/app"
	"github.com/meridian-cp/meridian/services/store/storetest"
)

// transformer is the Transformer of an EncryptionConfiguration that
// encrypts Secrets with aescbc keys (YAML flow mappings).
func transformer(t *testing.T, keys string) *storagecrypt.Transformer {
	t.Helper()
	cfg, err := storagecrypt.ParseConfig([]byte("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n" +
		"resources: [{resources: [secrets], providers: [{aescbc: {keys: " + keys + "}}]}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := storagecrypt.New(context.Background(), cfg, storagecrypt.Options{Registry: registry.New(registry.Standard()...), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

const (
	key1 = "{name: key1, secret: AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=}"
	key2 = "{name: key2, secret: ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=}"
)

// TestTransformer: with a Transformer, what Create and Update send to the
// store is encrypted, and Get, List and Watch return it decrypted, once
// per value; a value read with an older key is Stale. A value that does
// not decrypt fails a Get and a List with the Transformer's error, and
// sets Err on its watch event, which the watch goes on after.
func TestTransformer(t *testing.T) {
	member := storetest.Start(t, storeapp.Config{ID: "store-0"})
	conn := member.Dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	raw := storage.New(conn)
	s := storage.New(conn, storage.WithTransformer(transformer(t, "["+key1+"]")))
	const key = "/registry/secrets/demo/db"

	w, err := s.Watch(ctx, "/registry/secrets/", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rev, err := s.Create(ctx, key, []byte("plain v1"), storage.Parent{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Update(ctx, key, []byte("plain v2"), rev, 0); err != nil {
		t.Fatal(err)
	}
	stored, _, err := raw.Get(ctx, key, storage.ReadOptions{})
	if err != nil || !bytes.HasPrefix(stored.Value, []byte("k8s:enc:aescbc:v1:key1:")) || bytes.Contains(stored.Value, []byte("plain")) {
		t.Fatalf("the store holds %q (%v)", stored.Value, err)
	}
	got, _, err := s.Get(ctx, key, storage.ReadOptions{})
	if err != nil || string(got.Value) != "plain v2" || got.Stale {
		t.Fatalf("Get: %q, stale %t, %v", got.Value, got.Stale, err)
	}
	list, err := s.List(ctx, "/registry/secrets/", storage.ListOptions{})
	if err != nil || len(list.KVs) != 1 || string(list.KVs[0].Value) != "plain v2" {
		t.Fatalf("List: %+v, %v", list, err)
	}
	b, err := w.Recv()
	if err != nil || len(b.Events) == 0 || string(b.Events[0].KV.Value) != "plain v1" {
		t.Fatalf("the create's event: %+v, %v", b, err)
	}
	if b, err = recvEvent(w, b, 1); err != nil || string(b.Events[len(b.Events)-1].KV.Value) != "plain v2" || string(b.Events[len(b.Events)-1].PrevKV.Value) != "plain v1" {
		t.Fatalf("the update's event: %+v, %v", b, err)
	}

	rotated := storage.New(conn, storage.WithTransformer(transformer(t, "["+key2+", "+key1+"]")))
	if got, _, err := rotated.Get(ctx, key, storage.ReadOptions{}); err != nil || string(got.Value) != "plain v2" || !got.Stale {
		t.Fatalf("Get with key2 first: %q, stale %t, %v; want stale", got.Value, got.Stale, err)
	}

	// A value the Transformer cannot read: written in clear.
	if _, err := raw.Create(ctx, "/registry/secrets/demo/clear", []byte("in clear"), storage.Parent{}, 0); err != nil {
		t.Fatal(err)
	}
	var de *storagecrypt.DecryptError
	if _, _, err := s.Get(ctx, "/registry/secrets/demo/clear", storage.ReadOptions{}); !errors.As(err, &de) {
		t.Fatalf("Get of an unreadable value: %v", err)
	}
	if _, err := s.List(ctx, "/registry/secrets/", storage.ListOptions{}); !errors.As(err, &de) {
		t.Fatalf("List with an unreadable value: %v", err)
	}
	b, err = w.Recv()
	if err != nil || len(b.Events) != 1 || !errors.As(b.Events[0].Err, &de) || b.Events[0].KV.Key != "/registry/secrets/demo/clear" || b.Events[0].KV.Value != nil {
		t.Fatalf("the unreadable value's event: %+v, %v", b, err)
	}
	if _, err := s.Create(ctx, "/registry/secrets/demo/after", []byte("after"), storage.Parent{}, 0); err != nil {
		t.Fatal(err)
	}
	if b, err = w.Recv(); err != nil || len(b.Events) != 1 || b.Events[0].Err != nil || string(b.Events[0].KV.Value) != "after" {
		t.Fatalf("the event after it: %+v, %v", b, err)
	}
}

// recvEvent returns b when it holds more than n events, else the next
// batch.
func recvEvent(w *storage.Watcher, b storage.WatchBatch, n int) (storage.WatchBatch, error) {
	if len(b.Events) > n {
		return b, nil
	}
	return w.Recv()
}
