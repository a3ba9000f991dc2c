package healthz

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-cp/meridian/lib/polltest"
	"github.com/meridian-cp/meridian/lib/telemetry/telemetrytest"
)

var errDown = errors.New("down")

// check returns a check named name that returns err; degraded makes it
// optional.
func check(name string, err error, degraded string) Check {
	return Check{Name: name, Degraded: degraded, Run: func(context.Context) error { return err }}
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, err := io.ReadAll(rec.Result().Body)
	if err != nil {
		t.Fatal(err)
	}
	return rec.Code, string(body)
}

// TestEndpoint: a required check that fails fails the endpoint; an
// optional one that fails does not, and verbose output names it degraded
// with what it costs, never the check's error.
func TestEndpoint(t *testing.T) {
	const fallback = "requests are served without flow control"
	for _, tc := range []struct {
		name    string
		checks  []Check
		code    int
		verbose string
	}{
		{"all pass", []Check{check("store", nil, ""), check("flowcontrol", nil, fallback)}, 200,
			"[+]ping ok\n[+]store ok\n[+]flowcontrol ok\nreadyz check passed\n"},
		{"optional fails", []Check{check("store", nil, ""), check("flowcontrol", errDown, fallback)}, 200,
			"[+]ping ok\n[+]store ok\n[+]flowcontrol ok (degraded: requests are served without flow control)\nreadyz check passed\n"},
		{"required fails", []Check{check("store", errDown, ""), check("flowcontrol", nil, fallback)}, 500,
			"[+]ping ok\n[-]store failed: reason withheld\n[+]flowcontrol ok\nreadyz check failed\n"},
		{"both fail", []Check{check("store", errDown, ""), check("flowcontrol", errDown, fallback)}, 500,
			"[+]ping ok\n[-]store failed: reason withheld\n[+]flowcontrol ok (degraded: requests are served without flow control)\nreadyz check failed\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := New("/readyz", nil, tc.checks...)
			code, body := get(t, h, "/readyz?verbose")
			if code != tc.code || body != tc.verbose {
				t.Errorf("/readyz?verbose: %d %q, want %d %q", code, body, tc.code, tc.verbose)
			}
			code, body = get(t, h, "/readyz")
			want := "ok"
			if tc.code != 200 {
				want = tc.verbose // a failure is always verbose, as kube-apiserver's
			}
			if code != tc.code || body != want {
				t.Errorf("/readyz: %d %q, want %d %q", code, body, tc.code, want)
			}
		})
	}
}

// TestSingleCheck: /readyz/<name> answers for that check alone, an
// optional one that fails with 200 and what it costs.
func TestSingleCheck(t *testing.T) {
	h := New("/readyz", nil, check("store", errDown, ""), check("flowcontrol", errDown, "requests are served without flow control"), check("admission", nil, "writes that need admission fail"))
	for _, tc := range []struct {
		path string
		code int
		body string
	}{
		{"/readyz/store", 500, "internal server error: store check failed\n"},
		{"/readyz/flowcontrol", 200, "ok (degraded: requests are served without flow control)"},
		{"/readyz/admission", 200, "ok"},
		{"/readyz/ping", 200, "ok"},
	} {
		if code, body := get(t, h, tc.path); code != tc.code || body != tc.body {
			t.Errorf("%s: %d %q, want %d %q", tc.path, code, body, tc.code, tc.body)
		}
	}
	if code, _ := get(t, h, "/readyz/nope"); code != 404 {
		t.Errorf("/readyz/nope: %d, want 404", code)
	}
	// Excluding the failing required check leaves the degraded one.
	code, body := get(t, h, "/readyz?exclude=store&exclude=nope&verbose")
	want := "[+]ping ok\n[+]store excluded: ok\n[+]flowcontrol ok (degraded: requests are served without flow control)\n[+]admission ok\n" +
		"warn: some health checks cannot be excluded: no matches for \"nope\"\nreadyz check passed\n"
	if code != 200 || body != want {
		t.Errorf("/readyz?exclude=store&exclude=nope&verbose: %d %q, want %q", code, body, want)
	}
}

// TestMetrics: the root paths record every check they run under
// kube-apiserver's names, by endpoint; an optional check that fails
// counts as a success there; excluded checks and single-check paths
// record nothing.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	checks := []Check{check("store", errDown, ""), check("flowcontrol", errDown, "requests are served without flow control")}
	readyz, livez := New("/readyz", m, checks...), New("/livez", m)
	get(t, readyz, "/readyz")
	get(t, readyz, "/readyz?verbose")
	get(t, readyz, "/readyz?exclude=store")
	get(t, readyz, "/readyz/store")
	get(t, livez, "/livez")

	for _, tc := range []struct {
		metric string
		labels map[string]string
		want   float64
	}{
		{"kubernetes_healthcheck", map[string]string{"name": "store", "type": "readyz"}, 0},
		{"kubernetes_healthcheck", map[string]string{"name": "flowcontrol", "type": "readyz"}, 1},
		{"kubernetes_healthcheck", map[string]string{"name": "ping", "type": "readyz"}, 1},
		{"kubernetes_healthcheck", map[string]string{"name": "ping", "type": "livez"}, 1},
		{"kubernetes_healthchecks_total", map[string]string{"name": "store", "type": "readyz", "status": "error"}, 2},
		{"kubernetes_healthchecks_total", map[string]string{"name": "store", "type": "readyz", "status": "success"}, 0},
		{"kubernetes_healthchecks_total", map[string]string{"name": "flowcontrol", "type": "readyz", "status": "success"}, 3},
		{"kubernetes_healthchecks_total", map[string]string{"name": "flowcontrol", "type": "readyz", "status": "error"}, 0},
		{"kubernetes_healthchecks_total", map[string]string{"name": "ping", "type": "livez", "status": "success"}, 1},
	} {
		if got := telemetrytest.Sum(t, reg, tc.metric, tc.labels); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.metric, tc.labels, got, tc.want)
		}
	}
}

// TestMonitor: a monitored check's result reaches the endpoint and the
// degraded gauge without the endpoint running it, it counts as degraded
// until its first run has finished, and it follows the dependency down and
// up again.
func TestMonitor(t *testing.T) {
	reg := prometheus.NewRegistry()
	var down atomic.Bool
	runs := atomic.Int64{}
	started := make(chan struct{})
	release := make(chan struct{})
	flow := Check{Name: "flowcontrol", Degraded: "requests are served without flow control", Run: func(ctx context.Context) error {
		if runs.Add(1) == 1 {
			// The first run waits for the test: until it finishes, the
			// dependency is not known to work.
			close(started)
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if down.Load() {
			return errDown
		}
		return nil
	}}
	mon, err := NewMonitor(MonitorConfig{Checks: []Check{flow}, Interval: time.Millisecond, Registerer: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h := New("/readyz", nil, append([]Check{check("store", nil, "")}, mon.Checks()...)...)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { defer close(stopped); mon.Run(ctx) }()
	defer func() { cancel(); <-stopped }()

	gauge := func() float64 {
		return telemetrytest.Sum(t, reg, "meridian_apigateway_dependency_degraded", map[string]string{"dependency": "flowcontrol"})
	}
	const degradedLine = "[+]flowcontrol ok (degraded: requests are served without flow control)\n"
	want := "[+]ping ok\n[+]store ok\n" + degradedLine + "readyz check passed\n"

	// The first run is under way and stuck: the endpoint answers from the
	// monitor without running the check itself.
	<-started
	if code, body := get(t, h, "/readyz?verbose"); code != 200 || body != want {
		t.Errorf("before the first result: %d %q, want 200 %q", code, body, want)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the check ran %d times, want once (by the monitor alone)", n)
	}
	if g := gauge(); g != 1 {
		t.Errorf("degraded gauge before the first result: %v, want 1", g)
	}

	close(release)
	healthy := "[+]ping ok\n[+]store ok\n[+]flowcontrol ok\nreadyz check passed\n"
	polltest.Until(t, 10*time.Second, "flowcontrol reported healthy", func() bool {
		_, body := get(t, h, "/readyz?verbose")
		return body == healthy
	})
	if g := gauge(); g != 0 {
		t.Errorf("degraded gauge while healthy: %v, want 0", g)
	}

	down.Store(true)
	polltest.Until(t, 10*time.Second, "flowcontrol reported degraded", func() bool {
		_, body := get(t, h, "/readyz?verbose")
		return body == want
	})
	if code, body := get(t, h, "/readyz"); code != 200 || body != "ok" {
		t.Errorf("/readyz while degraded: %d %q, want 200 ok", code, body)
	}
	if g := gauge(); g != 1 {
		t.Errorf("degraded gauge while failing: %v, want 1", g)
	}

	down.Store(false)
	polltest.Until(t, 10*time.Second, "flowcontrol reported healthy again", func() bool {
		_, body := get(t, h, "/readyz?verbose")
		return body == healthy && gauge() == 0
	})
}

// TestMonitorRefusesRequiredChecks: a check without Degraded must run
// when the endpoint is asked, never from a cache.
func TestMonitorRefusesRequiredChecks(t *testing.T) {
	if _, err := NewMonitor(MonitorConfig{Checks: []Check{check("store", nil, "")}}); err == nil {
		t.Fatal("NewMonitor accepted a required check")
	}
}
