package app_test

import (
	"net"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/meridian-cp/meridian/lib/grpcclient"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/app"
)

func TestApp(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := app.New(t.Context(), app.Config{StoreAddress: "127.0.0.1:7001", Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- a.Serve(lis) }()
	conn, err := grpcclient.Dial(lis.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := t.Context()

	hc := healthpb.NewHealthClient(conn)
	for svc, want := range map[string]healthpb.HealthCheckResponse_ServingStatus{
		"":              healthpb.HealthCheckResponse_SERVING,
		app.ServiceName: healthpb.HealthCheckResponse_NOT_SERVING,
	} {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != want {
			t.Fatalf("health %q: %v %v, want %v", svc, resp, err, want)
		}
	}
	// No fake WatchService is registered.
	_, err = watchv1.NewWatchServiceClient(conn).Get(ctx, &watchv1.GetRequest{})
	if status.Code(err) != codes.Unimplemented {
		t.Fatalf("WatchService.Get: %v, want Unimplemented", err)
	}
	if n := testutil.CollectAndCount(reg, "grpc_server_handled_total"); n == 0 {
		t.Fatal("no gRPC metrics")
	}

	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if err := <-served; err != nil {
		t.Fatalf("Serve after Close: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, ok := range []string{"store:7001", "127.0.0.1:7001", "[::1]:7001", "dns:///store.meridian.svc:7001"} {
		if err := (&app.Config{StoreAddress: ok}).Validate(); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "store"} {
		err := (&app.Config{StoreAddress: bad}).Validate()
		if err == nil || !strings.Contains(err.Error(), "StoreAddress") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if _, err := app.New(t.Context(), app.Config{}); err == nil {
		t.Fatal("New without a store address")
	}
}
