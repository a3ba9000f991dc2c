package grpcserver_test

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meridian-cp/meridian/lib/grpcserver"
	"github.com/meridian-cp/meridian/lib/grpcserver/grpcservertest"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/pki/pkitest"
	"github.com/meridian-cp/meridian/lib/telemetry/telemetrytest"
)

// boomDesc is a service whose methods panic when asked to: Unary when
// its request is "panic", Stream always.
var boomDesc = grpcservertest.Desc("test.Boom",
	func(_ context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if in.Value == "panic" {
			panic("boom")
		}
		return in, nil
	},
	func(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		panic("stream boom")
	})

func start(t *testing.T, opts grpcserver.Options) *grpc.ClientConn {
	t.Helper()
	srv, _, err := grpcserver.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv.RegisterService(boomDesc, nil)
	conn, err := grpc.NewClient(grpcservertest.Serve(t, srv), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestRecoveryAndMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	logs := &telemetrytest.Buffer{}
	conn := start(t, grpcserver.Options{
		Service:    "test",
		Registerer: reg,
		Logger:     slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	ctx := t.Context()

	if out, err := grpcservertest.CallUnary(ctx, conn, boomDesc, "hello"); err != nil || out != "hello" {
		t.Fatalf("ordinary call: %v %v", out, err)
	}
	_, err := grpcservertest.CallUnary(ctx, conn, boomDesc, "panic")
	if status.Code(err) != codes.Internal {
		t.Fatalf("panicking call: err = %v, want Internal", err)
	}
	if strings.Contains(status.Convert(err).Message(), "boom") {
		t.Fatalf("panic value leaked to the client: %v", err)
	}
	if _, err := grpcservertest.CallStream(ctx, conn, boomDesc, ""); status.Code(err) != codes.Internal {
		t.Fatalf("panicking stream: err = %v, want Internal", err)
	}
	// The server is still up.
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health after panics: %v", err)
	}

	handled := func(method, code string) float64 {
		return handledTotal(t, reg, method, code)
	}
	if got := handled("Unary", "Internal"); got != 1 {
		t.Errorf("handled{Unary,Internal} = %v, want 1", got)
	}
	if got := handled("Unary", "OK"); got != 1 {
		t.Errorf("handled{Unary,OK} = %v, want 1", got)
	}
	if got := handled("Stream", "Internal"); got != 1 {
		t.Errorf("handled{Stream,Internal} = %v, want 1", got)
	}
	n, err := testutil.GatherAndCount(reg, "grpc_server_started_total", "grpc_server_handling_seconds")
	if err != nil || n == 0 {
		t.Errorf("started/handling series: %d, %v", n, err)
	}

	l := logs.String()
	if !strings.Contains(l, "grpc handler panicked") || !strings.Contains(l, "goroutine") {
		t.Errorf("panic not logged with a stack:\n%s", l)
	}
	if !strings.Contains(l, `"method":"/test.Boom/Unary"`) || !strings.Contains(l, `"code":"Internal"`) {
		t.Errorf("calls not logged at debug:\n%s", l)
	}
	if strings.Contains(l, "hello") {
		t.Errorf("request body logged:\n%s", l)
	}
}

// handledTotal is grpc_server_handled_total of test.Boom's method ending
// with code.
func handledTotal(t *testing.T, reg *prometheus.Registry, method, code string) float64 {
	t.Helper()
	return telemetrytest.Sum(t, reg, "grpc_server_handled_total", map[string]string{"grpc_service": "test.Boom", "grpc_method": method, "grpc_code": code})
}

func TestSharedRegisterer(t *testing.T) {
	reg := prometheus.NewRegistry()
	for i := 0; i < 2; i++ {
		if _, err := grpcserver.ServerOptions(grpcserver.Options{Registerer: reg}); err != nil {
			t.Fatalf("registration %d: %v", i, err)
		}
	}
	// One registry wrapped per service, as the all-in-one binary does.
	reg = prometheus.NewRegistry()
	for _, svc := range []string{"store", "admission", "store"} {
		wrapped := prometheus.WrapRegistererWith(prometheus.Labels{"service": svc}, reg)
		if _, _, err := grpcserver.New(grpcserver.Options{Service: svc, Registerer: wrapped}); err != nil {
			t.Fatalf("wrapped registration for %s: %v", svc, err)
		}
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
}

func TestHealthServing(t *testing.T) {
	conn := start(t, grpcserver.Options{})
	resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("status %v", resp.GetStatus())
	}
}

func TestMaxRecvMsgSize(t *testing.T) {
	conn := start(t, grpcserver.Options{MaxRecvMsgSize: 1024})
	_, err := grpcservertest.CallUnary(t.Context(), conn, boomDesc, strings.Repeat("x", 2048))
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("oversized message: %v, want ResourceExhausted", err)
	}
	if _, err := grpcserver.ServerOptions(grpcserver.Options{MaxRecvMsgSize: -1}); err == nil {
		t.Fatal("negative MaxRecvMsgSize accepted")
	}
}

func TestAccess(t *testing.T) {
	ca := pkitest.NewCA(t, "test-ca")
	serving := pkitest.IssueTLS(t, ca, pkitest.LoopbackServer("svc"))
	gateway := pkitest.IssueTLS(t, ca, pki.CertSpec{CommonName: "gw", Organizations: []string{identity.GatewayOrganization}, Client: true})
	operator := pkitest.IssueTLS(t, ca, pki.CertSpec{CommonName: "op", Organizations: []string{identity.OperatorOrganization}, Client: true})
	reg := prometheus.NewRegistry()
	srv, _, err := grpcserver.New(grpcserver.Options{
		TLS:        pki.ServerTLS(serving, ca.Pool(), tls.RequireAndVerifyClientCert),
		Registerer: reg,
		Access:     identity.Policy{identity.Service("test.Boom"): {identity.GatewayOrganization}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.RegisterService(boomDesc, nil)
	addr := grpcservertest.Serve(t, srv)
	call := func(cert tls.Certificate) error {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(pki.ClientTLS(&cert, ca.Pool(), ""))))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// A panicking request shows that the refusal comes before the
		// handler.
		_, err = grpcservertest.CallUnary(t.Context(), conn, boomDesc, "panic")
		return err
	}
	if err := call(gateway); status.Code(err) != codes.Internal {
		t.Fatalf("gateway: %v, want the handler's Internal", err)
	}
	if err := call(operator); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("operator: %v, want PermissionDenied", err)
	}
	if got := handledTotal(t, reg, "Unary", "PermissionDenied"); got != 1 {
		t.Errorf("handled{Unary,PermissionDenied} = %v, want 1", got)
	}

	// Plaintext (tests only) has no certificates to check.
	conn := start(t, grpcserver.Options{Access: identity.Policy{identity.Service("test.Boom"): {identity.GatewayOrganization}}})
	if _, err := grpcservertest.CallUnary(t.Context(), conn, boomDesc, "x"); err != nil {
		t.Fatalf("plaintext: %v", err)
	}
	if _, err := grpcserver.ServerOptions(grpcserver.Options{Access: identity.Policy{"test.Boom": {"o"}}}); err == nil {
		t.Fatal("malformed Access accepted")
	}
}

func TestServe(t *testing.T) {
	logs := &telemetrytest.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, nil))
	srv, _, err := grpcserver.New(grpcserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- grpcserver.Serve(srv, lis, "test", logger, "extra", 1) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	srv.GracefulStop()
	if err := <-served; err != nil {
		t.Fatalf("Serve after GracefulStop: %v, want nil", err)
	}
	if l := logs.String(); !strings.Contains(l, `"msg":"test serving"`) || !strings.Contains(l, `"addr":"`+lis.Addr().String()+`"`) || !strings.Contains(l, `"extra":1`) {
		t.Errorf("serving not logged with the address and attributes:\n%s", l)
	}

	// A listener that fails is an error naming the service.
	srv, _, err = grpcserver.New(grpcserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	lis, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis.Close()
	if err := grpcserver.Serve(srv, lis, "test", nil); err == nil || !strings.HasPrefix(err.Error(), "test: serve: ") {
		t.Fatalf("Serve on a closed listener: %v, want an error prefixed with the service", err)
	}
}
