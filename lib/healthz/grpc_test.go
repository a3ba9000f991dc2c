package healthz

import (
	"testing"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestGRPC: the check passes only while "" and every named service are
// SERVING; a service not built yet, a name the health server does not
// know and a server shut down fail it.
func TestGRPC(t *testing.T) {
	const name = "test.v1.Test"
	var hs *health.Server
	c := GRPC(func() (*health.Server, []string) { return hs, []string{name} })
	run := func() error { return c.Run(t.Context()) }
	if c.Name != GRPCCheckName {
		t.Fatalf("name %q", c.Name)
	}
	if err := run(); err == nil {
		t.Fatal("passed without a health server")
	}
	hs = health.NewServer() // "" SERVING, name unknown
	if err := run(); err == nil {
		t.Fatal("passed with the service name unknown")
	}
	hs.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	if err := run(); err != nil {
		t.Fatalf("failed while SERVING: %v", err)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	if err := run(); err == nil {
		t.Fatal(`passed with "" NOT_SERVING`)
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.Shutdown()
	if err := run(); err == nil {
		t.Fatal("passed after Shutdown")
	}
}
