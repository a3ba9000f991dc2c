package resources

import (
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/readparams"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// TestStoreRead: each read semantic maps to one store read, and only
// NotOlderThan waits for a revision first.
func TestStoreRead(t *testing.T) {
	for _, c := range []struct {
		read  readparams.Read
		opts  storage.ListOptions
		minRV int64
	}{
		{readparams.Read{Semantic: readparams.MostRecent, Limit: 2}, storage.ListOptions{Limit: 2}, 0},
		{readparams.Read{Semantic: readparams.Any}, storage.ListOptions{ReadOptions: storage.ReadOptions{Serializable: true}}, 0},
		{readparams.Read{Semantic: readparams.NotOlderThan, Revision: 5}, storage.ListOptions{ReadOptions: storage.ReadOptions{Serializable: true}}, 5},
		{readparams.Read{Semantic: readparams.Exact, Revision: 5}, storage.ListOptions{ReadOptions: storage.ReadOptions{Revision: 5, Serializable: true}}, 0},
		{readparams.Read{Semantic: readparams.Continue, Revision: 7, Start: "/k/b", Limit: 3},
			storage.ListOptions{ReadOptions: storage.ReadOptions{Revision: 7, Serializable: true}, Start: "/k/b", Limit: 3}, 0},
		{readparams.Read{Semantic: readparams.ContinueInconsistent, Start: "/k/b", Limit: 3}, storage.ListOptions{Start: "/k/b", Limit: 3}, 0},
	} {
		opts, minRV := storeRead(c.read)
		if opts != c.opts || minRV != c.minRV {
			t.Errorf("storeRead(%+v) = %+v, %d; want %+v, %d", c.read, opts, minRV, c.opts, c.minRV)
		}
	}
}

// TestParseWatch: the gateway serves resourceVersionMatch=NotOlderThan
// only with sendInitialEvents=true (an invalid resourceVersion is reported
// first); every other case is readparams.Watch's.
func TestParseWatch(t *testing.T) {
	yes, no := true, false
	const onlyTrue = "resourceVersionMatch NotOlderThan is only supported for watch with sendInitialEvents=true"
	for _, c := range []struct {
		req  *apiv1.WatchRequest
		want readparams.WatchStart
		err  string
	}{
		{&apiv1.WatchRequest{ResourceVersionMatch: "NotOlderThan"}, readparams.WatchStart{}, onlyTrue},
		{&apiv1.WatchRequest{ResourceVersion: "5", ResourceVersionMatch: "NotOlderThan", SendInitialEvents: &no}, readparams.WatchStart{}, onlyTrue},
		{&apiv1.WatchRequest{ResourceVersion: "x", ResourceVersionMatch: "NotOlderThan", SendInitialEvents: &no}, readparams.WatchStart{}, `invalid resourceVersion "x": it must be an integer`},
		{&apiv1.WatchRequest{ResourceVersion: "5", ResourceVersionMatch: "NotOlderThan", SendInitialEvents: &yes, AllowWatchBookmarks: true},
			readparams.WatchStart{Read: readparams.Read{Semantic: readparams.NotOlderThan, Revision: 5}, Initial: true, EndBookmark: true}, ""},
		{&apiv1.WatchRequest{ResourceVersion: "5"}, readparams.WatchStart{Read: readparams.Read{Semantic: readparams.Exact, Revision: 5}}, ""},
		{&apiv1.WatchRequest{SendInitialEvents: &no}, readparams.WatchStart{}, "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"},
	} {
		got, err := parseWatch(c.req)
		if c.err != "" {
			if !apierrors.IsBadRequest(err) || err.Error() != c.err {
				t.Errorf("parseWatch(%v) = %+v, %v; want 400 %q", c.req, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("parseWatch(%v) = %+v, %v; want %+v", c.req, got, err, c.want)
		}
	}
}
