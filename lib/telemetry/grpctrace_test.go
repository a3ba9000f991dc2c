package telemetry

import (
	"context"
	"io"
	"net"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// traceServer serves EmptyCall (failing with Internal when the caller
// sends "fail" metadata) and StreamingOutputCall (two messages), and records
// whether each call's context held a sampled span.
type traceServer struct {
	testgrpc.UnimplementedTestServiceServer
	traced chan bool
}

func (s *traceServer) EmptyCall(ctx context.Context, _ *testgrpc.Empty) (*testgrpc.Empty, error) {
	s.traced <- Traced(ctx)
	if len(metadata.ValueFromIncomingContext(ctx, "fail")) > 0 {
		return nil, status.Error(codes.Internal, "failed")
	}
	return &testgrpc.Empty{}, nil
}

func (s *traceServer) StreamingOutputCall(_ *testgrpc.StreamingOutputCallRequest, ss grpc.ServerStreamingServer[testgrpc.StreamingOutputCallResponse]) error {
	s.traced <- Traced(ss.Context())
	for range 2 {
		if err := ss.Send(&testgrpc.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
	return nil
}

// A call made under a sampled span makes a client span under it and a
// server span under that, with otelgrpc's names, kinds and status; a call
// under no span or an unsampled one makes no span on either side and the
// server's context holds none. A server stream's spans end when the
// stream does.
func TestGRPCTracingFollowsTheCaller(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	defer tp.Shutdown(context.Background())

	ts := &traceServer{traced: make(chan bool, 1)}
	u, s := GRPCServerInterceptors(tp)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(u), grpc.ChainStreamInterceptor(s))
	testgrpc.RegisterTestServiceServer(srv, ts)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), append(GRPCClientOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := testgrpc.NewTestServiceClient(conn)

	// Untraced: no span, the server's context holds no sampled span.
	unsampled, us := tp.Tracer("t").Start(t.Context(), "unsampled request") // NeverSample
	for _, ctx := range []context.Context{t.Context(), unsampled} {
		if _, err := c.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
			t.Fatal(err)
		}
		if <-ts.traced {
			t.Error("the server traced a call whose caller was not sampled")
		}
	}
	us.End()
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d spans from untraced calls", n)
	}

	// Sampled: client span, server span, the server sees it.
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true})
	ctx, req := tp.Tracer("t").Start(trace.ContextWithRemoteSpanContext(t.Context(), sc), "request")
	if _, err := c.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
		t.Fatal(err)
	}
	if !<-ts.traced {
		t.Error("the server's context holds no sampled span for a sampled caller")
	}
	if _, err := c.EmptyCall(metadata.AppendToOutgoingContext(ctx, "fail", "1"), &testgrpc.Empty{}); status.Code(err) != codes.Internal {
		t.Fatalf("failing call: %v", err)
	}
	<-ts.traced
	st, err := c.StreamingOutputCall(ctx, &testgrpc.StreamingOutputCallRequest{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for ; ; n++ {
		if _, err := st.Recv(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if n != 2 || !<-ts.traced {
		t.Errorf("stream: %d messages, server traced: false", n)
	}
	req.End()

	spans := exp.GetSpans()
	if len(spans) != 7 {
		t.Fatalf("%d spans, want 7 (request, and a client and server span per call): %v", len(spans), spanNames(spans))
	}
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range spans {
		byID[s.SpanContext.SpanID()] = s
	}
	var servers int
	for _, s := range spans {
		if s.SpanKind != trace.SpanKindServer {
			continue
		}
		servers++
		client := byID[s.Parent.SpanID()]
		if client.SpanKind != trace.SpanKindClient || client.Name != s.Name || byID[client.Parent.SpanID()].Name != "request" {
			t.Errorf("server span %q: parent %q (%v) under %q, want the client span of the call under the request", s.Name, client.Name, client.SpanKind, byID[client.Parent.SpanID()].Name)
		}
		if s.SpanContext.TraceID() != sc.TraceID() {
			t.Errorf("server span %q in trace %v", s.Name, s.SpanContext.TraceID())
		}
		failed := s.Status.Code.String() == "Error"
		if wantFail := s.Name == "grpc.testing.TestService/EmptyCall" && attrValueOf(s, "rpc.response.status_code") == "INTERNAL"; failed != wantFail {
			t.Errorf("server span %q: status %v, attributes %v", s.Name, s.Status, s.Attributes)
		}
	}
	if servers != 3 {
		t.Errorf("%d server spans, want 3: %v", servers, spanNames(spans))
	}
}

func spanNames(spans tracetest.SpanStubs) []string {
	var n []string
	for _, s := range spans {
		n = append(n, s.Name+"/"+s.SpanKind.String())
	}
	return n
}

func attrValueOf(s tracetest.SpanStub, key string) string {
	for _, a := range s.Attributes {
		if string(a.Key) == key {
			return a.Value.Emit()
		}
	}
	return ""
}
