// Package healthztest reads a service's health endpoints in tests.
package healthztest

import (
	"io"
	"net/http"
	"testing"
	"time"
)

// Get GETs url and returns the status code and the body; a request that
// fails (nothing listening, a timeout of 5s) fails the test.
func Get(t testing.TB, url string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

// NotReady is the verbose body of /readyz while the service's gRPC
// health status is not SERVING (healthz.GRPC failing).
const NotReady = "[+]ping ok\n[-]grpc-health failed: reason withheld\nreadyz check failed\n"

// Ready is the verbose body of /readyz while it is SERVING.
const Ready = "[+]ping ok\n[+]grpc-health ok\nreadyz check passed\n"
