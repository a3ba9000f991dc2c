package app_test

import (
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	"github.com/meridian-cp/meridian/lib/grpcclient"
	"github.com/meridian-cp/meridian/lib/polltest"
	"github.com/meridian-cp/meridian/services/admission/app"
	storeapp "github.com/meridian-cp/meridian/services/store/app"
	"github.com/meridian-cp/meridian/services/store/storetest"
)

// health starts a with its store at storeAddr and returns a function
// reading its gRPC health status.
func health(t *testing.T, storeAddr string) func() healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	a, err := app.New(t.Context(), app.Config{Registerer: prometheus.NewRegistry(), StoreAddress: storeAddr})
	if err != nil {
		t.Fatal(err)
	}
	served := daemontest.Serve(t, a)
	t.Cleanup(func() { served.CloseWithin(t, 10*time.Second) })
	conn, err := grpcclient.Dial(served.Addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	hc := healthpb.NewHealthClient(conn)
	return func() healthpb.HealthCheckResponse_ServingStatus {
		resp, err := hc.Check(t.Context(), &healthpb.HealthCheckRequest{Service: app.ServiceName})
		if err != nil {
			t.Fatalf("health: %v", err)
		}
		return resp.GetStatus()
	}
}

// A service that cannot read its store serves no policies, so it must not
// say it is ready; once the store has been read it is.
func TestReadyOnceTheStoreIsRead(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := lis.Addr().String()
	_ = lis.Close()
	unreachable := health(t, nobody)
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if s := unreachable(); s != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("health with no store at %s: %v, want NOT_SERVING", nobody, s)
		}
		time.Sleep(100 * time.Millisecond)
	}

	store := storetest.Start(t, storeapp.Config{ID: "store-0"})
	reachable := health(t, store.Addr)
	polltest.Until(t, 30*time.Second, "SERVING once the store is read", func() bool {
		return reachable() == healthpb.HealthCheckResponse_SERVING
	})
}
