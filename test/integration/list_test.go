package integration

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
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
		// Every third object is labelled, and every one past 1000.
		labels := map[string]string{}
		if i%3 == 0 || i >= 1000 {
			labels["picked"] = "yes"
		}
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%04d", i), Labels: labels}, Data: map[string]string{"i": fmt.Sprint(i)}}, metav1.CreateOptions{})
		return err
	})
	if t.Failed() {
		return
	}
	// Lists of default hold its kube-root-ca.crt too, after big-*.
	t.Run("gzip", func(t *testing.T) { checkGzip(ctx, t, e, n+1) })
	for _, ct := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
		t.Run(ct, func(t *testing.T) {
			cms := e.clientFor(t, ct).CoreV1().ConfigMaps("default")
			all, err := cms.List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			all.Items = withoutRootCA(t, all.Items)
			if len(all.Items) != n || all.ResourceVersion == "" || all.Continue != "" {
				t.Fatalf("whole list: %d items, rv %q, continue %q", len(all.Items), all.ResourceVersion, all.Continue)
			}
			for i, it := range all.Items {
				if want := fmt.Sprintf("big-%04d", i); it.Name != want || it.Data["i"] != fmt.Sprint(i) {
					t.Fatalf("item %d is %s %v, want %s", i, it.Name, it.Data, want)
				}
			}
			picked, err := cms.List(ctx, metav1.ListOptions{LabelSelector: "picked=yes"})
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for i := range n {
				if i%3 == 0 || i >= 1000 {
					want = append(want, fmt.Sprintf("big-%04d", i))
				}
			}
			if len(picked.Items) != len(want) {
				t.Fatalf("selected list: %d items, want %d", len(picked.Items), len(want))
			}
			for i, it := range picked.Items {
				if it.Name != want[i] {
					t.Fatalf("selected item %d is %s, want %s", i, it.Name, want[i])
				}
			}
			first, err := cms.List(ctx, metav1.ListOptions{Limit: 700})
			if err != nil {
				t.Fatal(err)
			}
			if len(first.Items) != 700 || first.Continue == "" || first.RemainingItemCount == nil || *first.RemainingItemCount != n+1-700 {
				t.Fatalf("limit 700: %d items, continue %q, remaining %v", len(first.Items), first.Continue, first.RemainingItemCount)
			}
			rest, err := cms.List(ctx, metav1.ListOptions{Limit: 700, Continue: first.Continue})
			if err != nil {
				t.Fatal(err)
			}
			if len(rest.Items) != n+1-700 || rest.Continue != "" || rest.Items[0].Name != "big-0700" || rest.ResourceVersion != first.ResourceVersion {
				t.Fatalf("continuation: %d items from %s, continue %q, rv %s/%s", len(rest.Items), rest.Items[0].Name, rest.Continue, rest.ResourceVersion, first.ResourceVersion)
			}
		})
	}
}

// checkGzip: a list over the compression threshold is gzip-encoded for a
// client that accepts gzip, twice in a row (compressors are reused), and
// decompresses to the whole list; the same list is sent as it is without
// Accept-Encoding or with gzip refused (q=0); a small response (one
// object) is never compressed.
func checkGzip(ctx context.Context, t *testing.T, e *env, n int) {
	transport, err := rest.TransportFor(e.config)
	if err != nil {
		t.Fatal(err)
	}
	// Setting Accept-Encoding by hand turns off net/http's transparent
	// decompression: the test sees the bytes as sent.
	hc := &http.Client{Transport: transport}
	get := func(path, acceptEncoding string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.config.Host+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "application/json")
		if acceptEncoding != "" {
			req.Header.Set("Accept-Encoding", acceptEncoding)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
		}
		return resp, body
	}
	items := func(body []byte) int {
		t.Helper()
		var list corev1.ConfigMapList
		if err := json.Unmarshal(body, &list); err != nil {
			t.Fatalf("list: %v", err)
		}
		return len(list.Items)
	}
	const list = "/api/v1/namespaces/default/configmaps"
	var plains [][]byte
	for i, path := range []string{list, list, list + "?limit=500"} {
		resp, body := get(path, "gzip")
		if resp.Header.Get("Content-Encoding") != "gzip" || !strings.Contains(resp.Header.Get("Vary"), "Accept-Encoding") {
			t.Fatalf("list %d with gzip accepted: Content-Encoding %q, Vary %q", i, resp.Header.Get("Content-Encoding"), resp.Header.Get("Vary"))
		}
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		plain, err := io.ReadAll(zr)
		if err != nil {
			t.Fatalf("list %d: gunzip: %v", i, err)
		}
		want := n
		if i == 2 {
			want = 500
		}
		if got := items(plain); got != want || len(body) >= len(plain) {
			t.Fatalf("list %d: %d items, want %d; %d bytes compressed from %d", i, got, want, len(body), len(plain))
		}
		plains = append(plains, plain)
	}
	// The compressed lists (watchfanout's, from memoized runs the second
	// time) are byte for byte the lists sent plain: nothing was written
	// in between.
	for i, ae := range []string{"identity", "gzip;q=0"} {
		resp, body := get(list, ae)
		if resp.Header.Get("Content-Encoding") != "" || items(body) != n {
			t.Fatalf("list with Accept-Encoding %q: Content-Encoding %q", ae, resp.Header.Get("Content-Encoding"))
		}
		if !bytes.Equal(body, plains[i]) {
			t.Fatalf("list %d decompressed differs from the plain list", i)
		}
	}
	if _, body := get(list+"?limit=500", "identity"); !bytes.Equal(body, plains[2]) {
		t.Fatal("a chunk decompressed differs from the plain chunk")
	}
	resp, body := get(list+"/big-0001", "gzip")
	if resp.Header.Get("Content-Encoding") != "" || !bytes.Contains(body, []byte(`"name":"big-0001"`)) {
		t.Fatalf("one object with gzip accepted: Content-Encoding %q, %s", resp.Header.Get("Content-Encoding"), body)
	}
}
