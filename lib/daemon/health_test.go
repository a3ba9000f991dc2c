package daemon_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/meridian-cp/meridian/lib/daemon"
	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	"github.com/meridian-cp/meridian/lib/grpcclient"
	"github.com/meridian-cp/meridian/lib/grpcserver"
	"github.com/meridian-cp/meridian/lib/healthz/healthztest"
)

// drainingService is a gRPC service whose Close sets its health
// NOT_SERVING, then waits for the test before it stops, as a service's
// Close drains calls in flight.
type drainingService struct {
	srv     *grpc.Server
	health  *health.Server
	addr    chan string
	closing chan struct{} // closed when Close has called Shutdown
	release chan struct{} // Close stops the server once this is closed
}

const testService = "test.v1.Test"

func (s *drainingService) Serve(lis net.Listener) error {
	s.addr <- lis.Addr().String()
	return grpcserver.Serve(s.srv, lis, "test", nil)
}

func (s *drainingService) Close() error {
	s.health.Shutdown()
	close(s.closing)
	<-s.release
	s.srv.Stop()
	return nil
}

func (s *drainingService) Health() (*health.Server, []string) {
	return s.health, []string{testService}
}

// TestHealthEndpoints: on --metrics-listen, /readyz and /healthz follow
// the gRPC health service: not ready (500, the failing check named) while
// the service's name is NOT_SERVING, ready ("ok") once it and "" are
// SERVING, not ready again from the moment Close starts draining, while
// the HTTP server still answers; /livez is ok throughout. The gRPC health
// service says the same at each step.
func TestHealthEndpoints(t *testing.T) {
	metrics := daemontest.FreeAddrs(t, 1)[0]
	svc := &drainingService{addr: make(chan string, 1), closing: make(chan struct{}), release: make(chan struct{})}
	cmd := daemon.Command{
		Name: "test", Listen: "127.0.0.1:0", MetricsListen: metrics,
		Build: func(_ context.Context, env daemon.Env) (daemon.Server, error) {
			srv, hs, err := grpcserver.New(grpcserver.Options{Logger: env.Logger})
			if err != nil {
				return nil, err
			}
			hs.SetServingStatus(testService, healthpb.HealthCheckResponse_NOT_SERVING)
			svc.srv, svc.health = srv, hs
			return svc, nil
		},
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.Run(ctx, []string{"--log-level=error"}, io.Discard) }()
	var addr string
	select {
	case addr = <-svc.addr:
	case err := <-done:
		t.Fatalf("Run returned early: %v", err)
	}
	conn, err := grpcclient.Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	grpcStatus := func() healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := healthpb.NewHealthClient(conn).Check(t.Context(), &healthpb.HealthCheckRequest{Service: testService})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	base := "http://" + metrics
	expect := func(step, path string, wantCode int, wantBody string) {
		t.Helper()
		if code, body := healthztest.Get(t, base+path); code != wantCode || body != wantBody {
			t.Errorf("%s: GET %s: %d %q, want %d %q", step, path, code, body, wantCode, wantBody)
		}
	}
	notReady := func(step string) {
		t.Helper()
		if s := grpcStatus(); s != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("%s: gRPC health %s, want NOT_SERVING", step, s)
		}
		expect(step, "/readyz", http.StatusInternalServerError, healthztest.NotReady)
		expect(step, "/readyz?verbose", http.StatusInternalServerError, healthztest.NotReady)
		expect(step, "/healthz", http.StatusInternalServerError, "[+]ping ok\n[-]grpc-health failed: reason withheld\nhealthz check failed\n")
		expect(step, "/readyz/grpc-health", http.StatusInternalServerError, "internal server error: grpc-health check failed\n")
		expect(step, "/livez", http.StatusOK, "ok")
	}

	notReady("before ready")

	svc.health.SetServingStatus(testService, healthpb.HealthCheckResponse_SERVING)
	if s := grpcStatus(); s != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("ready: gRPC health %s", s)
	}
	expect("ready", "/readyz", http.StatusOK, "ok")
	expect("ready", "/readyz?verbose", http.StatusOK, healthztest.Ready)
	expect("ready", "/healthz", http.StatusOK, "ok")
	expect("ready", "/livez", http.StatusOK, "ok")
	expect("ready", "/livez?verbose", http.StatusOK, "[+]ping ok\nlivez check passed\n")

	// The overall status ("") alone failing fails readiness too.
	svc.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	expect("overall not serving", "/readyz", http.StatusInternalServerError, healthztest.NotReady)
	svc.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	expect("overall serving again", "/readyz", http.StatusOK, "ok")

	cancel() // SIGTERM: Close sets NOT_SERVING and drains
	select {
	case <-svc.closing:
	case <-time.After(10 * time.Second):
		t.Fatal("Close not called after cancel")
	}
	notReady("draining")

	close(svc.release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
}
