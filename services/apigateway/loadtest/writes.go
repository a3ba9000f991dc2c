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
// Txn of the same size, so the gateway's overhead (its p50 minus the
// store's) shows in the last column. Each write is measured in alternating
// slices with the Txn (see measurePaired), so that both see the same load
// on a machine shared with other work, and its row names the Txn p50 of
// its own slices.
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
	// Created names and Txn keys are new in every run, so that a rerun on
	// the same data dir creates rather than conflicts.
	run := time.Now().UnixNano()

	payload := bytes.Repeat([]byte("x"), 1200)
	txn := func() (int, error) {
		key := []byte(fmt.Sprintf("/loadtest/txn/%d-%d", run, writeID.Add(1)))
		_, err := kv.Txn(ctx, &storev1.TxnRequest{
			Compare: []*storev1.Compare{{Key: key, Target: storev1.Compare_TARGET_CREATE, Result: storev1.Compare_RESULT_EQUAL, TargetUnion: &storev1.Compare_CreateRevision{}}},
			Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{Key: key, Value: payload}}}},
		})
		return len(payload), err
	}
	var txns result
	paired := func(name string, op func() (int, error)) {
		gw, st := measurePaired(d, cc, op, txn)
		txns.merge(st)
		reportOver(name, cc, gw, st.p50())
	}

	paired("gateway create", func() (int, error) {
		return send(c, http.MethodPost, base, "application/json", body(fmt.Sprintf("c-%d-%d", run, writeID.Add(1))), 201)
	})
	paired("gateway update (PUT, unconditional)", func() (int, error) {
		n := mine()
		return send(c, http.MethodPut, base+"/"+n, "application/json", body(n), 200)
	})
	paired("gateway patch (json-patch)", func() (int, error) {
		return send(c, http.MethodPatch, base+"/"+mine(), "application/json-patch+json", []byte(`[{"op":"replace","path":"/data/v","value":"`+value+`"}]`), 200)
	})
	paired("gateway patch (merge)", func() (int, error) {
		return send(c, http.MethodPatch, base+"/"+mine(), "application/merge-patch+json", []byte(`{"data":{"v":"`+value+`"}}`), 200)
	})
	paired("gateway patch (strategic merge)", func() (int, error) {
		return send(c, http.MethodPatch, base+"/"+mine(), "application/strategic-merge-patch+json", []byte(`{"data":{"v":"`+value+`"}}`), 200)
	})
	paired("gateway apply (server-side)", func() (int, error) {
		n := mine()
		return send(c, http.MethodPatch, base+"/"+n+"?fieldManager=loadtest&force=true", "application/apply-patch+yaml", body(n), 200)
	})
	report("store   Txn put 1 KiB (all slices above)", cc, txns)
}

// pairSlice is how long each side of measurePaired runs before the other
// takes over.
const pairSlice = 500 * time.Millisecond

// measurePaired runs a and b at concurrency cc in alternating slices of
// pairSlice, for d each in total, and returns their results: slow drifts
// of the machine's load (other jobs, garbage collection) reach both.
func measurePaired(d time.Duration, cc int, a, b func() (int, error)) (ra, rb result) {
	for left := d; left > 0; left -= pairSlice {
		slice := min(left, pairSlice)
		ra.merge(measure(slice, cc, a))
		rb.merge(measure(slice, cc, b))
	}
	return ra, rb
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
