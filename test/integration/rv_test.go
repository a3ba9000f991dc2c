package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func rvOf(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", s, err)
	}
	return n
}

// TestResourceVersionSemantics checks every row of the get and list
// resourceVersion tables of the API concepts, against a store with history.
func TestResourceVersionSemantics(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cms := e.client.CoreV1().ConfigMaps("default")
	v1, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "rv"}, Data: map[string]string{"v": "1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v1.Data["v"] = "2"
	v2, err := cms.Update(ctx, v1, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv1, rv2 := rvOf(t, v1.ResourceVersion), rvOf(t, v2.ResourceVersion)
	future := fmt.Sprint(rv2 + 1000)

	type want struct {
		value string // data.v of the object, or of the list's only item
		// stale is a value also accepted: resourceVersion="0" is "any
		// version; the newest preferred, strong consistency not required"
		// (the API concepts), and the watch tier may not have seen the
		// update yet.
		stale  string
		listRV int64 // exact list resourceVersion wanted (0: at least rv2)
		code   int32 // error code, 0 for success
		cause  metav1.CauseType
	}
	cases := []struct {
		name      string
		list      bool
		rv, match string
		want      want
	}{
		{"get, unset: most recent", false, "", "", want{value: "2"}},
		{"get, 0: any", false, "0", "", want{value: "2", stale: "1"}},
		{"get, N not older than", false, v1.ResourceVersion, "", want{value: "2"}},
		{"get, N from the future: 504 after a bounded wait", false, future, "", want{code: 504, cause: metav1.CauseTypeResourceVersionTooLarge}},
		{"get, not a number", false, "x", "", want{code: 400}},
		{"list, unset: consistent", true, "", "", want{value: "2"}},
		{"list, 0: any", true, "0", "", want{value: "2", stale: "1"}},
		{"list, N: not older than", true, v1.ResourceVersion, "", want{value: "2"}},
		{"list, N NotOlderThan", true, v1.ResourceVersion, "NotOlderThan", want{value: "2"}},
		{"list, N Exact: history", true, v1.ResourceVersion, "Exact", want{value: "1", listRV: rv1}},
		{"list, future NotOlderThan: 504", true, future, "NotOlderThan", want{code: 504, cause: metav1.CauseTypeResourceVersionTooLarge}},
		{"list, 0 Exact: invalid", true, "0", "Exact", want{code: 400}},
		{"list, match without rv: invalid", true, "", "NotOlderThan", want{code: 400}},
		{"list, unknown match: invalid", true, "5", "Sometimes", want{code: 400}},
	}
	raw := e.client.CoreV1().RESTClient()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := raw.Get().Namespace("default").Resource("configmaps")
			if !tc.list {
				req = req.Name("rv")
			} else {
				req = req.Param("fieldSelector", "metadata.name=rv")
			}
			if tc.rv != "" {
				req = req.Param("resourceVersion", tc.rv)
			}
			if tc.match != "" {
				req = req.Param("resourceVersionMatch", tc.match)
			}
			// No retries: client-go retries a 504 with Retry-After ten times.
			res := req.MaxRetries(0).Do(ctx)
			err := res.Error()
			body, _ := res.Raw()
			if tc.want.code != 0 {
				st, ok := err.(apierrors.APIStatus)
				if !ok {
					t.Fatalf("want a %d Status, got %v", tc.want.code, err)
				}
				if st.Status().Code != tc.want.code {
					t.Fatalf("code %d (%s), want %d", st.Status().Code, st.Status().Message, tc.want.code)
				}
				if tc.want.cause != "" && !hasCause(st.Status(), tc.want.cause) {
					t.Fatalf("no %s cause in %+v", tc.want.cause, st.Status().Details)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var value string
			var listRV int64
			if tc.list {
				var l corev1.ConfigMapList
				if err := json.Unmarshal(body, &l); err != nil || len(l.Items) != 1 {
					t.Fatalf("list: %v %s", err, body)
				}
				value, listRV = l.Items[0].Data["v"], rvOf(t, l.ResourceVersion)
			} else {
				var cm corev1.ConfigMap
				if err := json.Unmarshal(body, &cm); err != nil {
					t.Fatal(err)
				}
				value = cm.Data["v"]
			}
			if value != tc.want.value && (tc.want.stale == "" || value != tc.want.stale) {
				t.Errorf("value %q, want %q", value, tc.want.value)
			}
			if tc.list && tc.want.listRV != 0 && listRV != tc.want.listRV {
				t.Errorf("list resourceVersion %d, want %d", listRV, tc.want.listRV)
			}
			if tc.list && tc.want.listRV == 0 && value == tc.want.value && listRV < rv2 {
				t.Errorf("list resourceVersion %d older than the last write %d", listRV, rv2)
			}
		})
	}

	// A first chunk at N without a match is read at exactly N (the
	// table's legacy paging row), in every encoding watchfanout and the
	// store serve.
	for _, ct := range []string{"application/json", "application/vnd.kubernetes.protobuf", "application/yaml"} {
		l, err := e.clientFor(t, ct).CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{ResourceVersion: v1.ResourceVersion, Limit: 1, FieldSelector: "metadata.name=rv"})
		if err != nil {
			t.Fatalf("%s: list, N with a limit: %v", ct, err)
		}
		if len(l.Items) != 1 || l.Items[0].Data["v"] != "1" || rvOf(t, l.ResourceVersion) != rv1 {
			t.Errorf("%s: list, N with a limit: resourceVersion %s, items %v; want the state at %d", ct, l.ResourceVersion, l.Items, rv1)
		}
	}

	// After compaction, Exact reads below it are 410 Expired.
	e.compact(ctx)
	err = raw.Get().Namespace("default").Resource("configmaps").Param("resourceVersion", v1.ResourceVersion).Param("resourceVersionMatch", "Exact").Do(ctx).Error()
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Errorf("Exact list below the compacted revision: %v, want 410 Expired", err)
	}
}

func hasCause(st metav1.Status, ct metav1.CauseType) bool {
	if st.Details == nil {
		return false
	}
	for _, c := range st.Details.Causes {
		if c.Type == ct {
			return true
		}
	}
	return false
}

// TestChunkedListIsOneSnapshot lists in chunks while writers change the
// collection: every chunk is read at the first chunk's revision, so the
// pages add up to exactly the objects that existed then.
func TestChunkedListIsOneSnapshot(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cms := e.client.CoreV1().ConfigMaps("default")
	const n = 120
	for i := 0; i < n; i++ {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := cms.List(ctx, metav1.ListOptions{Limit: 25})
	if err != nil {
		t.Fatal(err)
	}
	// The chunks hold default's kube-root-ca.crt too.
	if first.Continue == "" || first.RemainingItemCount == nil || *first.RemainingItemCount != n+1-25 {
		t.Fatalf("first chunk: continue=%q remaining=%v", first.Continue, first.RemainingItemCount)
	}
	// Writers change the collection between chunks.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("new-%04d", i)}}, metav1.CreateOptions{})
			_ = cms.Delete(ctx, fmt.Sprintf("cm-%03d", 119-i%50), metav1.DeleteOptions{})
		}
	}()
	names := map[string]bool{}
	for _, it := range first.Items {
		names[it.Name] = true
	}
	tok := first.Continue
	for tok != "" {
		page, err := cms.List(ctx, metav1.ListOptions{Limit: 25, Continue: tok})
		if err != nil {
			t.Fatal(err)
		}
		if page.ResourceVersion != first.ResourceVersion {
			t.Errorf("chunk at resourceVersion %s, first at %s", page.ResourceVersion, first.ResourceVersion)
		}
		for _, it := range page.Items {
			names[it.Name] = true
		}
		tok = page.Continue
	}
	close(stop)
	<-done
	if len(names) != n+1 || !names[rootCA] {
		t.Errorf("chunks held %d objects, want the %d that existed at the first chunk and %s", len(names), n, rootCA)
	}
	for i := 0; i < n; i++ {
		if !names[fmt.Sprintf("cm-%03d", i)] {
			t.Errorf("cm-%03d missing from the snapshot", i)
		}
	}
}

// TestExpiredContinue: a continue token whose revision was compacted is a
// 410 that carries a token continuing the list inconsistently.
func TestExpiredContinue(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cms := e.client.CoreV1().ConfigMaps("default")
	for i := 0; i < 10; i++ {
		if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := cms.List(ctx, metav1.ListOptions{Limit: 4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c9-late"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.compact(ctx)
	_, err = cms.List(ctx, metav1.ListOptions{Limit: 4, Continue: first.Continue})
	if !apierrors.IsResourceExpired(err) {
		t.Fatalf("continue after compaction: %v, want 410 Expired", err)
	}
	tok := err.(apierrors.APIStatus).Status().ListMeta.Continue
	if tok == "" {
		t.Fatal("the 410 carries no inconsistent continue token")
	}
	rest, err := cms.List(ctx, metav1.ListOptions{Continue: tok})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, it := range rest.Items {
		got[it.Name] = true
	}
	if !got["c9-late"] || got[first.Items[0].Name] {
		t.Errorf("inconsistent continuation returned %v", got)
	}
}
