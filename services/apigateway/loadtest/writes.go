package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// writes measures the write path — create, update, the three patch types
// and server-side apply of a 1 KiB ConfigMap — next to the store's own
// Txn of the same size, so the gateway's overhead (its latency minus the
// store's) shows.
func writes(ctx context.Context, c *http.Client, kv storev1.KVServiceClient, api, ns string, d time.Duration, cc int, writeID *atomic.Int64) {
	base := api + "/api/v1/namespaces/" + ns + "/configmaps"
	value := strings.Repeat("x", 1000)
	body := func(name string) []byte {
		return []byte(fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q},"data":{"v":%q}}`, name, value))
	}
	// Each writer has its own object, so updates measure the path, not
	// contention on one key.
	names := make([]string, cc)
	for i := range names {
		names[i] = fmt.Sprintf("w-%d-%d", time.Now().UnixNano(), i)
		if _, err := send(c, http.MethodPost, base, "application/json", body(names[i]), 201); err != nil {
			fmt.Println("  seed writer object:", err)
			return
		}
	}
	var slot atomic.Int64
	mine := func() string { return names[int(slot.Add(1))%cc] }

	report("gateway create", cc, measure(d, cc, func() (int, error) {
		return send(c, http.MethodPost, base, "application/json", body(fmt.Sprintf("c-%d", writeID.Add(1))), 201)
	}))
	report("gateway update (PUT, unconditional)", cc, measure(d, cc, func() (int, error) {
		n := mine()
		return send(c, http.MethodPut, base+"/"+n, "application/json", body(n), 200)
	}))
	report("gateway patch (json-patch)", cc, measure(d, cc, func() (int, error) {
		return send(c, http.MethodPatch, base+"/"+mine(), "application/json-patch+json", []byte(`[{"op":"replace","path":"/data/v","value":"`+value+`"}]`), 200)
	}))
	report("gateway patch (merge)", cc, measure(d, cc, func() (int, error) {
		return send(c, http.MethodPatch, base+"/"+mine(), "application/merge-patch+json", []byte(`{"data":{"v":"`+value+`"}}`), 200)
	}))
	report("gateway patch (strategic merge)", cc, measure(d, cc, func() (int, error) {
		return send(c, http.MethodPatch, base+"/"+mine(), "application/strategic-merge-patch+json", []byte(`{"data":{"v":"`+value+`"}}`), 200)
	}))
	report("gateway apply (server-side)", cc, measure(d, cc, func() (int, error) {
		n := mine()
		return send(c, http.MethodPatch, base+"/"+n+"?fieldManager=loadtest&force=true", "application/apply-patch+yaml", body(n), 200)
	}))
	payload := bytes.Repeat([]byte("x"), 1200)
	report("store   Txn put 1 KiB (compare + put)", cc, measure(d, cc, func() (int, error) {
		key := []byte(fmt.Sprintf("/loadtest/txn/%d", writeID.Add(1)))
		_, err := kv.Txn(ctx, &storev1.TxnRequest{
			Compare: []*storev1.Compare{{Key: key, Target: storev1.Compare_TARGET_CREATE, Result: storev1.Compare_RESULT_EQUAL, TargetUnion: &storev1.Compare_CreateRevision{}}},
			Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{Key: key, Value: payload}}}},
		})
		return len(payload), err
	}))
}

func send(c *http.Client, method, url, ct string, body []byte, want int) (int, error) {
	req, _ := http.NewRequest(method, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", ct)
	req.Header.Set("Accept", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, _ := io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != want {
		return int(n), fmt.Errorf("%s %s: %s", method, url, resp.Status)
	}
	return int(n), nil
}
