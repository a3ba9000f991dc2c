package telemetry_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/meridian-cp/meridian/lib/telemetry"
)

func TestServeMetrics(t *testing.T) {
	reg := telemetry.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "meridian_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)

	ctx, cancel := context.WithCancel(t.Context())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	telemetry.ServeMetrics(ctx, lis, reg, nil, false)
	url := "http://" + lis.Addr().String() + "/metrics"
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for _, want := range []string{"meridian_test_total 3", "go_goroutines", "process_"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	if resp, err := http.Get("http://" + lis.Addr().String() + "/debug/pprof/"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("/debug/pprof/ without profiles: %v, %v", resp, err)
	} else {
		resp.Body.Close()
	}

	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get(url)
		if err != nil {
			break
		}
		resp.Body.Close()
		if time.Now().After(deadline) {
			t.Fatal("metrics server still serving after ctx was cancelled")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	l, err := telemetry.NewLogger(&buf, "warn", "json")
	if err != nil {
		t.Fatal(err)
	}
	l.Info("hidden")
	l.Warn("shown", "k", "v")
	if s := buf.String(); strings.Contains(s, "hidden") || !strings.Contains(s, `"msg":"shown"`) {
		t.Fatalf("json/warn output: %s", s)
	}
	buf.Reset()
	l, err = telemetry.NewLogger(&buf, "DEBUG", "text")
	if err != nil {
		t.Fatal(err)
	}
	l.Debug("dbg")
	if !strings.Contains(buf.String(), "msg=dbg") {
		t.Fatalf("text/debug output: %s", buf.String())
	}
	if _, err := telemetry.NewLogger(&buf, "loud", "json"); err == nil {
		t.Fatal("bad level accepted")
	}
	if _, err := telemetry.NewLogger(&buf, "info", "xml"); err == nil {
		t.Fatal("bad format accepted")
	}
}

func TestRegisterReuses(t *testing.T) {
	reg := prometheus.NewRegistry()
	newVec := func() *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"l"})
	}
	a, err := telemetry.Register(reg, newVec())
	if err != nil {
		t.Fatal(err)
	}
	b, err := telemetry.Register(reg, newVec())
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatal("second registration did not return the existing collector")
	}
	if _, err := telemetry.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "x_total", Help: "other"})); err == nil {
		t.Fatal("conflicting registration accepted")
	}
}

func TestLoggerTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	l, err := telemetry.NewLogger(&buf, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xab}, SpanID: trace.SpanID{0xcd}, TraceFlags: trace.FlagsSampled})
	l.With("k", "v").InfoContext(trace.ContextWithSpanContext(context.Background(), sc), "traced")
	l.InfoContext(context.Background(), "untraced")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"trace_id":"ab000000000000000000000000000000"`) || !strings.Contains(lines[0], `"span_id":"cd00000000000000"`) || strings.Contains(lines[1], "trace_id") {
		t.Fatalf("log lines:\n%s", buf.String())
	}
}
