package command

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	"github.com/meridian-cp/meridian/lib/healthz/healthztest"
	"github.com/meridian-cp/meridian/lib/polltest"
	storeapp "github.com/meridian-cp/meridian/services/store/app"
	"github.com/meridian-cp/meridian/services/store/storetest"
)

// TestReadyzFollowsCacheSync runs the binary's command against a store
// address where no store answers yet: its --metrics-listen serves /livez
// ok and /readyz 500 naming the failing grpc-health check, since the
// cache has not synced. Once a store member serves there, the cache
// syncs and /readyz answers 200 "ok".
func TestReadyzFollowsCacheSync(t *testing.T) {
	storeLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addrs := daemontest.FreeAddrs(t, 2)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"--listen", addrs[0], "--metrics-listen", addrs[1],
			"--store-address", storeLis.Addr().String(), "--log-level", "error"}, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watchfanout: %v", err)
		}
	})
	base := "http://" + addrs[1]
	polltest.Until(t, 30*time.Second, "watchfanout serving its metrics address", func() bool {
		c, err := net.DialTimeout("tcp", addrs[1], time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	if code, body := healthztest.Get(t, base+"/readyz?verbose"); code != http.StatusInternalServerError || body != healthztest.NotReady {
		t.Errorf("before the cache synced: /readyz?verbose: %d %q, want 500 %q", code, body, healthztest.NotReady)
	}
	if code, body := healthztest.Get(t, base+"/livez"); code != http.StatusOK || body != "ok" {
		t.Errorf("before the cache synced: /livez: %d %q, want 200 ok", code, body)
	}

	st, err := storeapp.New(t.Context(), storeapp.Config{DataDir: t.TempDir(), Bootstrap: true, ClientAddress: storeLis.Addr().String(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Serve(t, st, storeLis)
	polltest.Until(t, 60*time.Second, "watchfanout ready", func() bool {
		code, _ := healthztest.Get(t, base+"/readyz")
		return code == http.StatusOK
	})
	if code, body := healthztest.Get(t, base+"/readyz?verbose"); code != http.StatusOK || body != healthztest.Ready {
		t.Errorf("after the cache synced: /readyz?verbose: %d %q, want 200 %q", code, body, healthztest.Ready)
	}
}
