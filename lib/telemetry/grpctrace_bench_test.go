package telemetry

import (
	"context"
	"net"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

type emptyServer struct {
	testgrpc.UnimplementedTestServiceServer
}

func (emptyServer) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	return &testgrpc.Empty{}, nil
}

// BenchmarkGRPCCall is the tracing work per unary gRPC call over loopback
// (client and server in this process): tracing off; on at 1% for a call
// of a request that was not sampled (what 99% of calls are); and a
// sampled call (client and server span, kept in memory).
func BenchmarkGRPCCall(b *testing.B) {
	for _, bc := range []struct {
		name    string
		on      bool
		sampled bool
	}{{"off", false, false}, {"ratio=0.01/unsampled", true, false}, {"sampled", true, true}} {
		b.Run(bc.name, func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()),
				sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01))))
			defer tp.Shutdown(context.Background())
			var opts []grpc.ServerOption
			if bc.on {
				opts = GRPCServerOptions(tp)
			}
			srv := grpc.NewServer(opts...)
			testgrpc.RegisterTestServiceServer(srv, emptyServer{})
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go func() { _ = srv.Serve(lis) }()
			defer srv.Stop()
			conn, err := grpc.NewClient(lis.Addr().String(), append(GRPCClientOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			c := testgrpc.NewTestServiceClient(conn)
			ctx := context.Background()
			if bc.sampled {
				sctx, s := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter())).Tracer("b").Start(ctx, "request")
				defer s.End()
				ctx = sctx
			}
			if _, err := c.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.EmptyCall(ctx, &testgrpc.Empty{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
