package storagemigrate_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/internal/storagemigrate"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/storagecrypt"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	storeapp "github.com/meridian-cp/meridian/services/store/app"
	"github.com/meridian-cp/meridian/services/store/storetest"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var reg = registry.New(registry.Standard()...)

// transformer encrypts Secrets with aescbc keys (a YAML flow list).
func transformer(t *testing.T, keys string) *storagecrypt.Transformer {
	t.Helper()
	cfg, err := storagecrypt.ParseConfig([]byte("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n" +
		"resources: [{resources: [secrets], providers: [{aescbc: {keys: " + keys + "}}]}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := storagecrypt.New(context.Background(), cfg, storagecrypt.Options{Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

const (
	key1 = "{name: key1, secret: AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=}"
	key2 = "{name: key2, secret: ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=}"
)

// racing is a Transformer that, the first time it decrypts key, first
// writes that key with another value, as a gateway's update racing the
// migration would.
type racing struct {
	storagemigrate.Transformer
	key   string
	write func()
	once  sync.Once
}

func (r *racing) Decrypt(ctx context.Context, key string, stored []byte) ([]byte, bool, error) {
	if key == r.key {
		r.once.Do(r.write)
	}
	return r.Transformer.Decrypt(ctx, key, stored)
}

// startStore starts a one-member store for the test and returns a
// connection to it, closed when the test ends.
func startStore(t *testing.T) *grpc.ClientConn {
	t.Helper()
	return storetest.Start(t, storeapp.Config{ID: "store-0"}).Dial(t)
}

// TestMigrate rewrites the stale Secrets of a real store with the current
// key: those under the old key, each keeping its lease; not the current
// ones, nor other resources; one that a concurrent write changed keeps
// that write's value (re-encrypted); one that does not decrypt is
// reported, the rest done. A dry run writes nothing.
func TestMigrate(t *testing.T) {
	conn := startStore(t)
	kv := storev1.NewKVServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := storev1.NewLeaseServiceClient(conn).LeaseGrant(ctx, &storev1.LeaseGrantRequest{Ttl: durationpb.New(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	old, cur := transformer(t, "["+key1+"]"), transformer(t, "["+key2+", "+key1+"]")
	put := func(tr *storagecrypt.Transformer, key, value string, lease int64) {
		t.Helper()
		v, err := tr.Encrypt(ctx, key, []byte(value))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{Key: []byte(key), Value: v, Lease: lease}}}}}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(key string) *storev1.KeyValue {
		t.Helper()
		r, err := kv.Range(ctx, &storev1.RangeRequest{Key: []byte(key)})
		if err != nil || len(r.GetKvs()) != 1 {
			t.Fatalf("%s: %v %v", key, err, r)
		}
		return r.GetKvs()[0]
	}
	const (
		leased  = "/registry/secrets/a/leased"
		raced   = "/registry/secrets/a/raced"
		current = "/registry/secrets/a/current"
		broken  = "/registry/secrets/b/broken"
		cm      = "/registry/configmaps/a/c"
	)
	put(old, leased, "v-leased", lease.GetId())
	put(old, raced, "v-raced", 0)
	put(cur, current, "v-current", 0)
	put(old, cm, "v-cm", 0)
	if _, err := kv.Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{
		Key: []byte(broken), Value: []byte("k8s:enc:aescbc:v1:key9:garbage"),
	}}}}}); err != nil {
		t.Fatal(err)
	}
	secrets, _ := reg.Lookup(schema.GroupVersionResource{Version: "v1", Resource: "secrets"})
	before := map[string]int64{current: get(current).GetModRevision(), cm: get(cm).GetModRevision(), leased: get(leased).GetModRevision()}

	results, err := storagemigrate.Run(ctx, storagemigrate.Config{KV: kv, Transformer: cur, Resources: []*registry.Resource{secrets}, DryRun: true, Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, storagemigrate.ErrFailed) || len(results) != 1 || results[0] != (storagemigrate.Result{Resource: "secrets", Objects: 4, Stale: 2, Failed: 1}) {
		t.Fatalf("dry run: %+v, %v", results, err)
	}
	if get(leased).GetModRevision() != before[leased] {
		t.Fatal("a dry run wrote")
	}

	// A writer still on the old key changes raced after the migration
	// read it: the migration's write of it fails, and it rewrites what
	// the writer wrote.
	race := &racing{Transformer: cur, key: raced, write: func() { put(old, raced, "v-raced-by-a-writer", 0) }}
	results, err = storagemigrate.Run(ctx, storagemigrate.Config{KV: kv, Transformer: race, Resources: []*registry.Resource{secrets}, Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, storagemigrate.ErrFailed) || len(results) != 1 || results[0] != (storagemigrate.Result{Resource: "secrets", Objects: 4, Stale: 2, Rewritten: 2, Failed: 1}) {
		t.Fatalf("migration: %+v, %v", results, err)
	}
	for key, want := range map[string]string{leased: "v-leased", raced: "v-raced-by-a-writer"} {
		got := get(key)
		plain, stale, err := cur.Decrypt(ctx, key, got.GetValue())
		if err != nil || stale || string(plain) != want || !bytes.HasPrefix(got.GetValue(), []byte("k8s:enc:aescbc:v1:key2:")) {
			t.Errorf("%s after the migration: %q (stale %t, %v)", key, plain, stale, err)
		}
	}
	if got := get(leased); got.GetLease() != lease.GetId() || got.GetModRevision() == before[leased] {
		t.Errorf("the leased Secret: lease %d, mod revision %d → %d; want lease %d and a new revision", got.GetLease(), before[leased], got.GetModRevision(), lease.GetId())
	}
	for _, key := range []string{current, cm} {
		if get(key).GetModRevision() != before[key] {
			t.Errorf("%s was rewritten", key)
		}
	}
}
