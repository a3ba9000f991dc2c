package server

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/kube/selection"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
)

// TestStoreReadError: how a failed store read of a list maps to the
// Kubernetes error: a compacted revision is 410 Expired, one the store has
// not reached is 504 with a ResourceVersionTooLarge cause, anything else
// 503; no error is none.
func TestStoreReadError(t *testing.T) {
	s := &Server{cfg: Config{Cache: newIdleCache(t)}}
	for _, tc := range []struct {
		err    error
		code   int32
		reason metav1.StatusReason
		cause  metav1.CauseType
	}{
		{err: nil},
		{err: status.Error(codes.OutOfRange, "compacted"), code: http.StatusGone, reason: metav1.StatusReasonExpired},
		{err: status.Error(codes.FailedPrecondition, "future revision"), code: http.StatusGatewayTimeout, reason: metav1.StatusReasonTimeout,
			cause: metav1.CauseTypeResourceVersionTooLarge},
		{err: status.Error(codes.Unavailable, "no leader"), code: http.StatusServiceUnavailable, reason: metav1.StatusReasonServiceUnavailable},
		{err: errors.New("connection reset"), code: http.StatusServiceUnavailable, reason: metav1.StatusReasonServiceUnavailable},
	} {
		err := s.storeReadError(tc.err, 7)
		if tc.err == nil {
			if err != nil {
				t.Errorf("no store error: %v", err)
			}
			continue
		}
		var se apierrors.APIStatus
		if !errors.As(err, &se) {
			t.Errorf("%v: %v is no Kubernetes status", tc.err, err)
			continue
		}
		st := se.Status()
		if st.Code != tc.code || st.Reason != tc.reason {
			t.Errorf("%v: %d %s, want %d %s", tc.err, st.Code, st.Reason, tc.code, tc.reason)
		}
		if tc.cause != "" && (st.Details == nil || len(st.Details.Causes) == 0 || st.Details.Causes[0].Type != tc.cause) {
			t.Errorf("%v: details %v, want cause %s", tc.err, st.Details, tc.cause)
		}
	}
}

// newIdleCache is a cache that never runs, so it never uses its store
// connection (nil): what the error mapping reads of it is its revision.
func newIdleCache(t *testing.T) *cache.Cache {
	t.Helper()
	cdc, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(cache.Options{Registry: registry.New(registry.Core()...), Codec: cdc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestListStore: chunks read from the store at a revision, as a list the
// cache cannot serve reads them: up to limit items from a key, the key to
// continue from, and the count of the keys left when there is no
// selector; errors of the read mapped by storeReadError, for a revision
// the store compacted and one it has not reached.
func TestListStore(t *testing.T) {
	e := newTestEnv(t, cache.Options{}, Config{})
	for i := range 5 {
		e.put("ls", fmt.Sprintf("cm%d", i), map[string]string{"odd": fmt.Sprint(i%2 == 1)})
	}
	rev := e.put("other", "cm", nil)
	r, _ := e.cache.Resource(e.cms.GVR)
	prefix := e.cms.KeyPrefix("ls")
	names := func(p listPage) []string {
		var out []string
		for _, obj := range p.items {
			acc, err := meta.Accessor(obj)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, acc.GetName())
		}
		return out
	}
	sel := func(labels string) *selection.Filter {
		f, err := selection.New(e.cms, labels, "")
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	for _, tc := range []struct {
		name      string
		start     string
		limit     int64
		flt       *selection.Filter
		want      []string
		next      string
		remaining *int64
	}{
		{name: "all", start: prefix, flt: sel(""), want: []string{"cm0", "cm1", "cm2", "cm3", "cm4"}},
		{name: "a chunk", start: prefix, limit: 2, flt: sel(""), want: []string{"cm0", "cm1"}, next: e.cms.Key("ls", "cm1") + "\x00", remaining: ptrTo[int64](3)},
		{name: "continued", start: e.cms.Key("ls", "cm1") + "\x00", limit: 2, flt: sel(""), want: []string{"cm2", "cm3"},
			next: e.cms.Key("ls", "cm3") + "\x00", remaining: ptrTo[int64](1)},
		{name: "the last chunk", start: e.cms.Key("ls", "cm3") + "\x00", limit: 2, flt: sel(""), want: []string{"cm4"}},
		{name: "a selected chunk: no count", start: prefix, limit: 1, flt: sel("odd=true"), want: []string{"cm1"}, next: e.cms.Key("ls", "cm1") + "\x00"},
		{name: "selected, all", start: prefix, flt: sel("odd=true"), want: []string{"cm1", "cm3"}},
	} {
		p, err := e.srv.listStore(t.Context(), r, prefix, tc.start, rev, tc.limit, tc.flt)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := names(p); !slices.Equal(got, tc.want) || p.next != tc.next || p.rev != rev {
			t.Errorf("%s: %v next %q at %d, want %v next %q at %d", tc.name, got, p.next, p.rev, tc.want, tc.next, rev)
		}
		if (p.remaining == nil) != (tc.remaining == nil) || p.remaining != nil && *p.remaining != *tc.remaining {
			t.Errorf("%s: remaining %v, want %v", tc.name, p.remaining, tc.remaining)
		}
	}

	if _, err := e.srv.listStore(t.Context(), r, prefix, prefix, rev+100, 0, sel("")); !apierrors.IsTimeout(err) {
		t.Errorf("a revision the store has not reached: %v, want a 504", err)
	}
	if err := e.srv.notCompacted(t.Context(), prefix, rev-1); err != nil {
		t.Errorf("before compaction: %v", err)
	}
	if _, err := e.kv.Compact(t.Context(), &storev1.CompactRequest{Revision: rev}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.srv.listStore(t.Context(), r, prefix, prefix, rev-1, 0, sel("")); !apierrors.IsResourceExpired(err) {
		t.Errorf("a compacted revision: %v, want a 410", err)
	}
	if err := e.srv.notCompacted(t.Context(), prefix, rev-1); !apierrors.IsResourceExpired(err) {
		t.Errorf("notCompacted of a compacted revision: %v, want a 410", err)
	}
	if err := e.srv.notCompacted(t.Context(), prefix, e.cache.Rev()); err != nil {
		t.Errorf("notCompacted of the cache's revision: %v", err)
	}
}

func ptrTo[T any](v T) *T { return &v }
