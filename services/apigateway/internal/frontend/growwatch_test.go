package frontend

import (
	"net/http/httptest"
	"testing"

	"github.com/meridian-cp/meridian/services/apigateway/internal/requestinfo"
)

// TestMayWatchCoversWatches: every request requestinfo makes a watch of
// is one whose stack ServeHTTP leaves alone (mayWatch), whatever form the
// watch takes; gets, lists and writes are not.
func TestMayWatchCoversWatches(t *testing.T) {
	for _, tc := range []struct {
		method, target string
		watch          bool
	}{
		{"GET", "/api/v1/namespaces/demo/configmaps?watch=1", true},
		{"GET", "/api/v1/namespaces/demo/configmaps?watch=true&resourceVersion=5", true},
		{"GET", "/api/v1/namespaces/demo/configmaps/app?watch=TRUE", true},
		{"GET", "/api/v1/namespaces/demo/configmaps?%77atch=1", true},
		{"GET", "/api/v1/watch/namespaces/demo/configmaps", true},
		{"GET", "/apis/apps/v1/watch/deployments", true},
		{"POST", "/api/v1/watch/namespaces/demo/configmaps", true},
		{"GET", "/api/v1/namespaces/demo/configmaps/app", false},
		{"GET", "/api/v1/namespaces/demo/configmaps?limit=500", false},
		{"POST", "/api/v1/namespaces/demo/configmaps", false},
	} {
		r := httptest.NewRequest(tc.method, tc.target, nil)
		info := requestinfo.New(r.Method, r.URL)
		if (info.Verb == "watch") != tc.watch {
			t.Fatalf("%s %s: verb %q; the case is wrong", tc.method, tc.target, info.Verb)
		}
		if got := mayWatch(r); got != tc.watch {
			t.Errorf("%s %s (verb %s): mayWatch = %v", tc.method, tc.target, info.Verb, got)
		}
	}
}
