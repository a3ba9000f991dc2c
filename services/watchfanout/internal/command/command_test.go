package command

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	storeclient "github.com/meridian-cp/meridian/services/store/client"
)

func TestStoreFlagsRejected(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--store-cert-file=c.crt"}, "--store-cert-file and --store-key-file"},
		{[]string{"--store-ca-file=/nonexistent/ca.crt"}, "store TLS"},
		{[]string{"--store-address=store"}, "StoreAddress"},
		{[]string{"--tls-cert-file=x"}, "--tls-key-file"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"--watcher-buffer=-1"}, "WatcherBuffer"},
		{[]string{"--history-max-events=-5"}, "HistoryMaxEvents"},
	} {
		err := Run(t.Context(), tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want it to mention %q", tc.args, err, tc.want)
		}
	}
}

// TestPprof: --pprof serves net/http/pprof beside /metrics on the metrics
// listener; without it only /metrics is served there.
func TestPprof(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("pprof=%v", on), func(t *testing.T) {
			metrics := daemontest.FreeAddrs(t, 1)[0]
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			args := []string{"--listen=127.0.0.1:0", "--metrics-listen=" + metrics, "--store-address=127.0.0.1:1", "--log-level=error"}
			if on {
				args = append(args, "--pprof")
			}
			done := make(chan error, 1)
			go func() { done <- Run(ctx, args, io.Discard) }()

			// The store is not there: the replica starts anyway and keeps
			// trying it in the background.
			if code := get(t, "http://"+metrics+"/metrics"); code != http.StatusOK {
				t.Fatalf("/metrics: %d", code)
			}
			want := http.StatusNotFound
			if on {
				want = http.StatusOK
			}
			if code := get(t, "http://"+metrics+"/debug/pprof/goroutine?debug=1"); code != want {
				t.Fatalf("/debug/pprof/goroutine: %d, want %d", code, want)
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("Run did not return after its context ended")
			}
		})
	}
	if err := Run(t.Context(), []string{"--pprof", "--metrics-listen="}, io.Discard); err == nil || !strings.Contains(err.Error(), "--metrics-listen") {
		t.Fatalf("--pprof without a metrics listener: %v", err)
	}
}

// get returns the status code of a GET of url, retrying (for up to 10s)
// while the server is not listening yet.
func get(t *testing.T, url string) int {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := client.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestMemoryLimit(t *testing.T) {
	for in, want := range map[string]int64{"": 0, "96Mi": 96 << 20, "1G": 1e9, "123456": 123456} {
		if got, err := memoryLimit(in); err != nil || got != want {
			t.Errorf("memoryLimit(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"abc", "-1Mi", "0", "0.5"} {
		if _, err := memoryLimit(in); err == nil {
			t.Errorf("memoryLimit(%q) succeeded", in)
		}
	}
}

// TestStoreAddressDefaultsToTheStoreListenAddress: with no flags, a
// replica dials the address a store member listens on with no flags
// (store --listen, whose default is storeclient.DefaultAddress), as the
// usage shows it.
func TestStoreAddressDefaultsToTheStoreListenAddress(t *testing.T) {
	var usage strings.Builder
	if err := Run(t.Context(), []string{"--help"}, &usage); err != nil {
		t.Fatalf("--help: %v", err)
	}
	_, entry, ok := strings.Cut(usage.String(), "-store-address string\n")
	if !ok {
		t.Fatalf("--help does not list --store-address:\n%s", usage.String())
	}
	entry, _, _ = strings.Cut(entry, "\n  -")
	if want := fmt.Sprintf("(default %q)", storeclient.DefaultAddress); !strings.Contains(entry, want) {
		t.Fatalf("--store-address: %s; want %s, where the store listens by default", strings.TrimSpace(entry), want)
	}
}
