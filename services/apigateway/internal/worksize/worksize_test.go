package worksize

import (
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	storeapp "github.com/meridian-cp/meridian/services/store/app"
	"github.com/meridian-cp/meridian/services/store/storetest"
)

// TestWideList: with 10,000 ConfigMaps in the store, a LIST of them is
// wide (the cap, 10 seats); a limited list from the store costs twice
// its limit; a list of one name, or of a resource with few objects, one
// seat; a count not read yet, one seat.
func TestWideList(t *testing.T) {
	member := storetest.Start(t, storeapp.Config{ID: "store-0"})
	conn := member.Dial(t)
	reg := registry.New(registry.Standard()...)
	cms, _ := reg.Lookup(registry.Core()[1].GVR)
	secrets, _ := reg.Lookup(registry.Core()[2].GVR)
	kv := storev1.NewKVServiceClient(conn)
	put := func(res *registry.Resource, from, to int) {
		var ops []*storev1.RequestOp
		for i := from; i < to; i++ {
			ops = append(ops, &storev1.RequestOp{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{
				Key: []byte(res.Key(fmt.Sprintf("ns-%d", i%7), fmt.Sprintf("o-%d", i))), Value: []byte("x"),
			}}})
		}
		if _, err := kv.Txn(t.Context(), &storev1.TxnRequest{Success: ops}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 10_000; i += 500 {
		put(cms, i, i+500)
	}
	put(secrets, 0, 250)

	tr := NewTracker(reg, storage.New(conn), 0, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if got := tr.ListSeats(cms.GVR, url.Values{}, false); got != 1 {
		t.Fatalf("before any count: %d seats, want 1", got)
	}
	tr.Refresh(t.Context())
	if got := tr.Count(cms.GVR); got != 10_000 {
		t.Fatalf("count %d, want 10000", got)
	}
	for _, tc := range []struct {
		name   string
		res    *registry.Resource
		query  string
		single bool
		want   uint32
	}{
		{"every configmap", cms, "", false, 10},
		{"a page, from the cache", cms, "limit=500", false, 10},
		{"a page from the store", cms, "limit=200&resourceVersion=5&resourceVersionMatch=Exact", false, 4},
		{"a selected page from the store", cms, "limit=50&labelSelector=a%3Db&resourceVersion=5&resourceVersionMatch=Exact", false, 10},
		{"one name", cms, "fieldSelector=metadata.name%3Do-1", false, 1},
		{"one name in the path", cms, "", true, 1},
		{"250 secrets", secrets, "", false, 3},
		{"no leases", registry.Leases(), "", false, 1},
		{"a bad query", cms, "limit=x", false, MaxListSeats},
	} {
		q, err := url.ParseQuery(tc.query)
		if err != nil {
			t.Fatal(err)
		}
		if got := tr.ListSeats(tc.res.GVR, q, tc.single); got != tc.want {
			t.Errorf("%s: %d seats, want %d", tc.name, got, tc.want)
		}
	}
}
