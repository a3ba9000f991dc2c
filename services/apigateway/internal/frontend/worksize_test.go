package frontend

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/flowcontrolclient"
	"github.com/meridian-cp/meridian/services/apigateway/internal/worksize"
)

// widthsFlowControl grants every request and records the widths asked.
type widthsFlowControl struct {
	flowcontrolv1.FlowControlServiceClient
	mu     sync.Mutex
	widths []uint32
}

func (f *widthsFlowControl) Acquire(_ context.Context, req *flowcontrolv1.AcquireRequest, _ ...grpc.CallOption) (*flowcontrolv1.AcquireResponse, error) {
	f.mu.Lock()
	f.widths = append(f.widths, req.GetDigest().GetEstimatedWidth())
	f.mu.Unlock()
	return &flowcontrolv1.AcquireResponse{Grant: &flowcontrolv1.Grant{Id: "g", Seats: req.GetDigest().GetEstimatedWidth()}}, nil
}

// fixedCounts counts 10,000 configmaps and nothing else.
type fixedCounts struct{}

func (fixedCounts) Count(_ context.Context, prefix string) (int64, error) {
	if strings.HasSuffix(prefix, "/configmaps/") {
		return 10_000, nil
	}
	return 0, nil
}

// TestListWidth: the gateway asks flow control for the seats a list will
// take — 10 for a list of 10,000 ConfigMaps — and one for a get.
func TestListWidth(t *testing.T) {
	fc := &widthsFlowControl{}
	work := worksize.NewTracker(registry.New(registry.Core()...), fixedCounts{}, 0, nil)
	work.Refresh(t.Context())
	h := newTestHandler(t, &recordingService{}, nil, func(c *Config) {
		c.FlowControl = flowcontrolclient.New(fc, "test", nil)
		c.WorkSize = work
	})
	for _, path := range []string{"/api/v1/namespaces/demo/configmaps", "/api/v1/namespaces/demo/configmaps/app", "/api/v1/namespaces/demo/configmaps?fieldSelector=metadata.name%3Dapp"} {
		req := httptest.NewRequest("GET", path, nil)
		req.Header.Set("Authorization", "Bearer admin-token")
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if len(fc.widths) != 3 || fc.widths[0] != 10 || fc.widths[1] != 1 || fc.widths[2] != 1 {
		t.Fatalf("widths asked %v, want [10 1 1]", fc.widths)
	}
}
