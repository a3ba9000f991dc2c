package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	"github.com/meridian-cp/meridian/lib/healthz/healthztest"
	"github.com/meridian-cp/meridian/lib/polltest"
)

// TestReadyzFollowsLeadership runs two voters of a two-voter cluster as
// the binary does. The first alone has no leader: its --metrics-listen
// serves /livez ok and /readyz and /healthz 500 naming the failing
// grpc-health check. Once the second starts, a leader is elected and
// both answer /readyz 200 "ok".
func TestReadyzFollowsLeadership(t *testing.T) {
	addrs := daemontest.FreeAddrs(t, 6)
	type member struct{ id, client, peer, metrics string }
	members := []member{{"a", addrs[0], addrs[1], addrs[2]}, {"b", addrs[3], addrs[4], addrs[5]}}
	initial := "a=" + members[0].peer + "/" + members[0].client + ",b=" + members[1].peer + "/" + members[1].client
	start := func(m member) {
		f, err := parseFlags([]string{
			"--id", m.id, "--data-dir", filepath.Join(t.TempDir(), m.id), "--listen", m.client,
			"--peer-listen", m.peer, "--initial-cluster", initial, "--metrics-listen", m.metrics,
			"--log-level", "error",
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- run(ctx, f, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("member %s: %v", m.id, err)
			}
		})
	}
	answers := func(addr string) bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	}

	a := "http://" + members[0].metrics
	start(members[0])
	polltest.Until(t, 30*time.Second, "member a serving its metrics address", func() bool { return answers(members[0].metrics) })
	for path, want := range map[string]string{
		"/readyz":         healthztest.NotReady,
		"/readyz?verbose": healthztest.NotReady,
		"/healthz":        "[+]ping ok\n[-]grpc-health failed: reason withheld\nhealthz check failed\n",
	} {
		if code, body := healthztest.Get(t, a+path); code != http.StatusInternalServerError || body != want {
			t.Errorf("without a leader: GET %s: %d %q, want 500 %q", path, code, body, want)
		}
	}
	if code, body := healthztest.Get(t, a+"/livez"); code != http.StatusOK || body != "ok" {
		t.Errorf("without a leader: GET /livez: %d %q, want 200 ok", code, body)
	}

	start(members[1])
	for _, m := range members {
		polltest.Until(t, 60*time.Second, "member "+m.id+" ready", func() bool {
			if !answers(m.metrics) {
				return false
			}
			code, _ := healthztest.Get(t, "http://"+m.metrics+"/readyz")
			return code == http.StatusOK
		})
		if code, body := healthztest.Get(t, "http://"+m.metrics+"/readyz?verbose"); code != http.StatusOK || body != healthztest.Ready {
			t.Errorf("member %s with a leader: /readyz?verbose: %d %q, want 200 %q", m.id, code, body, healthztest.Ready)
		}
	}
}
