package healthz

import (
	"context"
	"fmt"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// GRPCCheckName is the name of the check GRPC returns.
const GRPCCheckName = "grpc-health"

// GRPCSource returns a service's gRPC health server and the service names
// its readiness depends on besides "" (the overall status), or a nil
// server while the service is not built yet (a store member waiting for a
// leader).
type GRPCSource func() (*health.Server, []string)

// GRPC returns the check "grpc-health": it passes when the health server
// src returns reports SERVING for "" and for each of its service names,
// asked in process through the same Check method the gRPC health service
// answers, so that the HTTP endpoint and grpc.health.v1.Health never
// disagree: NOT_SERVING while a service is not ready (a store member
// without a leader, watchfanout before its cache synced) and from the
// moment Shutdown is called on a closing service. A nil server, or a
// name the server does not know, fails the check.
func GRPC(src GRPCSource) Check {
	return Check{Name: GRPCCheckName, Run: func(ctx context.Context) error {
		hs, services := src()
		if hs == nil {
			return fmt.Errorf("healthz: %s: the service is not started yet", GRPCCheckName)
		}
		for _, name := range append([]string{""}, services...) {
			resp, err := hs.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
			if err != nil {
				return fmt.Errorf("healthz: %s: service %q: %w", GRPCCheckName, name, err)
			}
			if s := resp.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
				return fmt.Errorf("healthz: %s: service %q is %s", GRPCCheckName, name, s)
			}
		}
		return nil
	}}
}
