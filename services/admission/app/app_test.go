package app_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	"github.com/meridian-cp/meridian/lib/grpcclient"
	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/app"
)

func TestApp(t *testing.T) {
	a, err := app.New(t.Context(), app.Config{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	served := daemontest.Serve(t, a)
	conn, err := grpcclient.Dial(served.Addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := t.Context()

	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: app.ServiceName})
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", resp, err)
	}
	c := admissionv1.NewAdmissionServiceClient(conn)
	ar, err := c.Admit(ctx, &admissionv1.AdmitRequest{
		Operation: admissionv1.Operation_OPERATION_UPDATE,
		Resource:  &admissionv1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
		Namespace: "ns", Name: "web", Object: []byte(`{}`), OldObject: []byte(`{}`),
	})
	if err != nil || !ar.GetAllowed() {
		t.Fatalf("admit: %v %v", ar, err)
	}
	if _, err := c.Admit(ctx, &admissionv1.AdmitRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty request: %v", err)
	}

	// In process: the same answers and errors, the scope over conn.
	local := a.ClientInProcess(nil, conn)
	if ar, err := local.Admit(ctx, &admissionv1.AdmitRequest{
		Operation: admissionv1.Operation_OPERATION_UPDATE,
		Resource:  &admissionv1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
		Namespace: "ns", Name: "web", Object: []byte(`{}`), OldObject: []byte(`{}`),
	}); err != nil || !ar.GetAllowed() {
		t.Fatalf("admit in process: %v %v", ar, err)
	}
	if _, err := local.Admit(ctx, &admissionv1.AdmitRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty request in process: %v", err)
	}
	if _, err := local.WatchScope(ctx, &admissionv1.WatchScopeRequest{}); err != nil {
		t.Fatalf("scope through the in-process client: %v", err)
	}

	// The empty set's scope is empty; an open scope stream does not hold
	// up Close, and ends UNAVAILABLE.
	stream, err := c.WatchScope(ctx, &admissionv1.WatchScopeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if sc, err := stream.Recv(); err != nil || sc.GetScope().GetEverything() || len(sc.GetScope().GetRules()) != 0 {
		t.Fatalf("scope: %v %v, want empty", sc, err)
	}
	served.CloseWithin(t, 10*time.Second)
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Fatalf("scope stream after Close: %v, want Unavailable", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := served.Wait(); err != nil {
		t.Fatalf("Serve after Close: %v", err)
	}
	if err := (&app.Config{MaxRequestBytes: -1}).Validate(); err == nil {
		t.Fatal("bad config accepted")
	}
}
