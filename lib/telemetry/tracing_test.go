package telemetry

import (
	"context"
	"log/slog"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

func TestTracingFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		enabled bool
		fails   bool
	}{
		{name: "nothing set: off", env: nil},
		{name: "endpoint: on, http/protobuf", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, enabled: true},
		{name: "traces endpoint, grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, enabled: true},
		{name: "exporter otlp alone: on", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, enabled: true},
		{name: "exporter none wins", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}},
		{name: "SDK disabled wins", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}},
		{name: "unknown exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, fails: true},
		{name: "unknown protocol", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, fails: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := tracingFrom(t.Context(), "test", slog.New(slog.DiscardHandler), func(k string) string { return tc.env[k] })
			if tc.fails {
				if err == nil {
					t.Fatal("accepted")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Shutdown(context.Background())
			if tr.Enabled() != tc.enabled || Recording(tr.Provider) != tc.enabled {
				t.Fatalf("enabled %v, recording %v; want %v", tr.Enabled(), Recording(tr.Provider), tc.enabled)
			}
			if got := len(GRPCServerOptions(tr.Provider)); (got > 0) != tc.enabled {
				t.Fatalf("%d gRPC server options with tracing enabled=%v", got, tc.enabled)
			}
		})
	}
}

func TestStartSpanFollowsParentSampling(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0))))

	// No span: nothing recorded, no allocation.
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		_, s := StartSpan(ctx, ScopeStore, "x")
		s.End()
	}); n != 0 {
		t.Errorf("StartSpan without a span allocates %v times", n)
	}
	// An unsampled root (ratio 0): children not recorded either.
	uctx, root := tp.Tracer("t").Start(ctx, "root")
	if _, s := StartSpan(uctx, ScopeStore, "child"); s.IsRecording() {
		t.Error("child of an unsampled span records")
	}
	root.End()
	if Traceparent(uctx) != "" {
		t.Error("traceparent of an unsampled span")
	}

	// A sampled remote parent: the child records, with the parent's
	// provider, and its traceparent starts a remote child elsewhere.
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true})
	sctx, parent := tp.Tracer("t").Start(trace.ContextWithRemoteSpanContext(ctx, sc), "server")
	cctx, child := StartSpan(sctx, ScopeStore, "child")
	if !child.IsRecording() {
		t.Fatal("child of a sampled span does not record")
	}
	tpHeader := Traceparent(cctx)
	child.End()
	parent.End()
	_, remote := StartRemoteSpan(context.Background(), tp, tpHeader, ScopeWatchFanout, "remote")
	remote.End()
	if _, s := StartRemoteSpan(context.Background(), nil, tpHeader, ScopeWatchFanout, "x"); s.IsRecording() {
		t.Error("StartRemoteSpan records without a provider")
	}

	byName := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		byName[s.Name] = s
	}
	if byName["child"].Parent.SpanID() != byName["server"].SpanContext.SpanID() {
		t.Errorf("child's parent is not the server span")
	}
	if byName["remote"].Parent.SpanID() != byName["child"].SpanContext.SpanID() || byName["remote"].SpanContext.TraceID() != sc.TraceID() {
		t.Errorf("remote span is not the child's child in its trace: %+v", byName["remote"].Parent)
	}
	if byName["child"].InstrumentationScope.Name != ScopeStore {
		t.Errorf("child's scope = %q", byName["child"].InstrumentationScope.Name)
	}
}

func TestSampledTraceparent(t *testing.T) {
	for v, want := range map[string]bool{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01": true,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00": false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03": true,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-zz": false,
		"": false, "1": false,
	} {
		if got := sampledTraceparent(v); got != want {
			t.Errorf("sampledTraceparent(%q) = %v", v, got)
		}
	}
}
