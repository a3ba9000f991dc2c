package integration

import (
	"net"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/services/admission/admissiontest"
	gateway "github.com/meridian-cp/meridian/services/apigateway/app"
	storeapp "github.com/meridian-cp/meridian/services/store/app"
	"github.com/meridian-cp/meridian/services/store/storetest"
)

// The services start in any order (docs/distributed.md): a gateway whose
// admission service does not answer yet keeps reconciling its bootstrap
// RBAC policy, whose writes pass through admission, until it does,
// instead of exiting.
func TestGatewayStartsBeforeAdmission(t *testing.T) {
	store := storetest.Start(t, storeapp.Config{ID: "store-0"})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	_ = lis.Close()
	// admissiontest.Start calls t.Fatal only if it cannot listen.
	late := time.AfterFunc(2*time.Second, func() {
		admissiontest.Start(t, addr, admissiontest.NewPolicies(admissiontest.Scope{}), admissiontest.Options{})
	})
	defer late.Stop()
	g := startAPIGateway(t, gateway.Config{StoreAddress: store.Addr, AdmissionAddress: addr})
	g.createConfigMap("after-admission-came-up")
}
