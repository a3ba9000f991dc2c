package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestLargeList lists more objects than the gateway reads from the store at
// once (it streams JSON lists page by page): whole, and with a limit that
// ends inside a page, in JSON and protobuf.
func TestLargeList(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cms := e.client.CoreV1().ConfigMaps("default")
	const n = 1100
	inParallel(t, n, func(i int) error {
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%04d", i)}, Data: map[string]string{"i": fmt.Sprint(i)}}, metav1.CreateOptions{})
		return err
	})
	if t.Failed() {
		return
	}
	for _, ct := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
		t.Run(ct, func(t *testing.T) {
			cms := e.clientFor(t, ct).CoreV1().ConfigMaps("default")
			all, err := cms.List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(all.Items) != n || all.ResourceVersion == "" || all.Continue != "" {
				t.Fatalf("whole list: %d items, rv %q, continue %q", len(all.Items), all.ResourceVersion, all.Continue)
			}
			for i, it := range all.Items {
				if want := fmt.Sprintf("big-%04d", i); it.Name != want || it.Data["i"] != fmt.Sprint(i) {
					t.Fatalf("item %d is %s %v, want %s", i, it.Name, it.Data, want)
				}
			}
			first, err := cms.List(ctx, metav1.ListOptions{Limit: 700})
			if err != nil {
				t.Fatal(err)
			}
			if len(first.Items) != 700 || first.Continue == "" || first.RemainingItemCount == nil || *first.RemainingItemCount != n-700 {
				t.Fatalf("limit 700: %d items, continue %q, remaining %v", len(first.Items), first.Continue, first.RemainingItemCount)
			}
			rest, err := cms.List(ctx, metav1.ListOptions{Limit: 700, Continue: first.Continue})
			if err != nil {
				t.Fatal(err)
			}
			if len(rest.Items) != n-700 || rest.Continue != "" || rest.Items[0].Name != "big-0700" || rest.ResourceVersion != first.ResourceVersion {
				t.Fatalf("continuation: %d items from %s, continue %q, rv %s/%s", len(rest.Items), rest.Items[0].Name, rest.Continue, rest.ResourceVersion, first.ResourceVersion)
			}
		})
	}
}
