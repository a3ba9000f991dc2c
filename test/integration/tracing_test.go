package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meridian-cp/meridian/internal/allinone"
	"github.com/meridian-cp/meridian/lib/polltest"
	"github.com/meridian-cp/meridian/lib/telemetry"
	"github.com/meridian-cp/meridian/lib/telemetry/telemetrytest"
)

// A create sent with a W3C traceparent (as kubectl and client-go can send
// one) by a user whom flow control does not exempt makes one trace, under
// the client's span, that crosses the gateway (authentication, flow
// control, admission), the admission service's evaluation of a
// ValidatingAdmissionPolicy, the flow-control service's queue, the store's
// proposal, raft log append with fsync, apply and commit, and the watch
// tier's fan-out of the resulting event, every span under the right
// parent.
func TestCreateTraceCrossesEveryService(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp, err := telemetry.NewTracerProvider(t.Context(), "meridian", sdktrace.WithSyncer(exp))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte(`trace-secret,tracer,1001,"team"`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs telemetrytest.Buffer
	logger, err := telemetry.NewLogger(&logs, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *allinone.Config) {
		c.TracerProvider = tp
		c.TokenAuthFile = tokens
		c.AuthorizationMode = "AlwaysAllow"
		c.Logger = logger
		c.RequestLogLevel = slog.LevelInfo
	})

	// A policy on ConfigMap creates, so that the gateway calls the
	// admission service.
	denyBadKey(t, e, "traced-policy")

	// A watcher for the fan-out to deliver to.
	w, err := e.client.CoreV1().ConfigMaps("default").Watch(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	// The client's own span: the trace and parent the server continues.
	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	clientSpan, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	cfg := rest.AnonymousClientConfig(e.config)
	cfg.BearerToken = "trace-secret"
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			r = r.Clone(r.Context())
			r.Header.Set("traceparent", fmt.Sprintf("00-%s-%s-01", traceID, clientSpan))
			return rt.RoundTrip(r)
		})
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "traced"}, Data: map[string]string{"k": "v"}}
	if _, err := c.CoreV1().ConfigMaps("default").Create(t.Context(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	for delivered := false; !delivered; {
		select {
		case ev := <-w.ResultChan():
			cm, ok := ev.Object.(*corev1.ConfigMap)
			delivered = ok && cm.Name == "traced"
		case <-timeout:
			t.Fatal("the watch did not deliver the create in 30s")
		}
	}

	var tr traceTree
	polltest.Until(t, 10*time.Second, "the fan-out span to be exported", func() bool {
		tr = newTraceTree(exp.GetSpans(), traceID)
		return tr.find("watchfanout.fanout") != nil
	})

	t.Logf("trace:%s", tr)
	server := tr.mustFind(t, "POST configmaps")
	if server.Parent.SpanID() != clientSpan || !server.Parent.IsRemote() {
		t.Errorf("gateway span's parent = %v (remote %v), want the client's span %v", server.Parent.SpanID(), server.Parent.IsRemote(), clientSpan)
	}
	tr.wantChild(t, server, "authenticate")
	acquire := tr.wantChild(t, server, "flowcontrol.acquire")
	// The all-in-one's gateway calls the flow-control service's Acquire
	// in process, through the service's interceptors: the service's span
	// for it is the acquire span's child (a separate gateway's Decide
	// stream carries the traceparent the same way).
	fcServer := tr.wantChild(t, acquire, "meridian.flowcontrol.v1.FlowControlService/Acquire")
	wait := tr.wantChild(t, fcServer, "flowcontrol.wait")
	for _, k := range []string{"k8s.flowcontrol.flow_schema", "k8s.flowcontrol.priority_level", "k8s.flowcontrol.queue_wait_seconds", "k8s.flowcontrol.seats"} {
		if !hasAttr(wait, k) {
			t.Errorf("flowcontrol.wait lacks %s: %v", k, wait.Attributes)
		}
	}
	admission := tr.mustFind(t, "admission")
	if !tr.isDescendant(admission, server) {
		t.Errorf("the gateway's admission span is not under its request span")
	}
	policy := tr.mustFind(t, "admission.policy")
	if !tr.isDescendant(policy, admission) {
		t.Errorf("the admission service's admission.policy span is not under the gateway's admission span; spans: %s", tr)
	}
	if policy.InstrumentationScope.Name != telemetry.ScopeAdmission {
		t.Errorf("admission.policy span's scope = %q", policy.InstrumentationScope.Name)
	}
	if got := attrValue(policy, "admission.policy.name"); got != "traced-policy" {
		t.Errorf("admission.policy span names policy %q, want traced-policy: %v", got, policy.Attributes)
	}
	if got := attrValue(policy, "admission.allowed"); got != "true" {
		t.Errorf("admission.policy span: admission.allowed = %q, want true", got)
	}

	propose := tr.mustFind(t, "store.propose")
	storeServer := tr.parent(propose)
	if storeServer == nil || storeServer.SpanKind != trace.SpanKindServer || !strings.HasPrefix(storeServer.Name, "meridian.store.v1.") {
		t.Fatalf("store.propose's parent is %v, want the store's gRPC server span", storeServer)
	}
	if !tr.isDescendant(storeServer, server) {
		t.Errorf("the store's server span is not under the gateway's span")
	}
	wal := tr.wantChild(t, propose, "store.wal.append")
	if !hasAttr(wal, "fsync") {
		t.Errorf("store.wal.append lacks fsync: %v", wal.Attributes)
	}
	apply := tr.wantChild(t, propose, "store.apply")
	tr.wantChild(t, apply, "store.commit")
	fanout := tr.wantChild(t, apply, "watchfanout.fanout")
	if fanout.InstrumentationScope.Name != telemetry.ScopeWatchFanout {
		t.Errorf("fan-out span's scope = %q", fanout.InstrumentationScope.Name)
	}

	// The create's one request log line, with its trace and span ids.
	var line map[string]any
	for _, l := range strings.Split(logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "request" && m["verb"] == "POST" && m["name"] == "" && m["resource"] == "configmaps" {
			line = m
		}
	}
	if line == nil {
		t.Fatalf("no request log line of the create in:\n%s", logs.String())
	}
	want := map[string]any{"user": "tracer", "code": float64(201), "namespace": "default", "trace_id": traceID.String(), "span_id": server.SpanContext.SpanID().String()}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("request log %s = %v, want %v; line %v", k, line[k], v, line)
		}
	}
	for _, k := range []string{"audit_id", "latency", "flow_schema_uid"} {
		if s, _ := line[k].(string); s == "" && line[k] == nil {
			t.Errorf("request log has no %s: %v", k, line)
		}
	}
	if line["flow_schema_uid"] == "" {
		t.Errorf("request log names no flow schema: %v", line)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// traceTree is the spans of one trace, by span ID.
type traceTree struct {
	spans map[trace.SpanID]*tracetest.SpanStub
}

func newTraceTree(all tracetest.SpanStubs, id trace.TraceID) traceTree {
	tr := traceTree{spans: map[trace.SpanID]*tracetest.SpanStub{}}
	for i := range all {
		if s := &all[i]; s.SpanContext.TraceID() == id {
			tr.spans[s.SpanContext.SpanID()] = s
		}
	}
	return tr
}

func (tr traceTree) find(name string) *tracetest.SpanStub {
	for _, s := range tr.spans {
		if s.Name == name {
			return s
		}
	}
	return nil
}

func (tr traceTree) mustFind(t *testing.T, name string) *tracetest.SpanStub {
	t.Helper()
	s := tr.find(name)
	if s == nil {
		t.Fatalf("no span %q in the trace; spans: %s", name, tr)
	}
	return s
}

func (tr traceTree) parent(s *tracetest.SpanStub) *tracetest.SpanStub {
	return tr.spans[s.Parent.SpanID()]
}

// wantChild returns the child of parent named name, failing t when there
// is none.
func (tr traceTree) wantChild(t *testing.T, parent *tracetest.SpanStub, name string) *tracetest.SpanStub {
	t.Helper()
	for _, s := range tr.spans {
		if s.Name == name && s.Parent.SpanID() == parent.SpanContext.SpanID() {
			return s
		}
	}
	t.Fatalf("span %q has no child %q; spans: %s", parent.Name, name, tr)
	return nil
}

// wantDescendant fails t unless a span named name is under ancestor.
func (tr traceTree) wantDescendant(t *testing.T, ancestor *tracetest.SpanStub, name string) {
	t.Helper()
	for _, s := range tr.spans {
		if s.Name == name && tr.isDescendant(s, ancestor) {
			return
		}
	}
	t.Errorf("span %q has no descendant %q; spans: %s", ancestor.Name, name, tr)
}

func (tr traceTree) isDescendant(s, ancestor *tracetest.SpanStub) bool {
	for p := tr.parent(s); p != nil; p = tr.parent(p) {
		if p == ancestor {
			return true
		}
	}
	return false
}

func (tr traceTree) String() string {
	var b strings.Builder
	for _, s := range tr.spans {
		parent := "(root)"
		if p := tr.parent(s); p != nil {
			parent = p.Name
		}
		fmt.Fprintf(&b, "\n  %s [%s] under %s", s.Name, s.InstrumentationScope.Name, parent)
	}
	return b.String()
}

func hasAttr(s *tracetest.SpanStub, key string) bool {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return true
		}
	}
	return false
}

// attrValue is the value of s's attribute key, as text; "" when s has
// none.
func attrValue(s *tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.Emit()
		}
	}
	return ""
}
