package grpcapi

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/flowcontrolclient"
	"github.com/meridian-cp/meridian/services/apigateway/internal/worksize"
)

// widthRecorder grants every request and records the widths asked.
type widthRecorder struct {
	flowcontrolv1.FlowControlServiceClient
	mu     sync.Mutex
	widths []uint32
}

func (f *widthRecorder) Acquire(_ context.Context, req *flowcontrolv1.AcquireRequest, _ ...grpc.CallOption) (*flowcontrolv1.AcquireResponse, error) {
	f.mu.Lock()
	f.widths = append(f.widths, req.GetDigest().GetEstimatedWidth())
	f.mu.Unlock()
	return &flowcontrolv1.AcquireResponse{Grant: &flowcontrolv1.Grant{Exempt: true}}, nil
}

// tenThousandConfigMaps counts 10,000 configmaps and nothing else.
type tenThousandConfigMaps struct{}

func (tenThousandConfigMaps) Count(_ context.Context, prefix string) (int64, error) {
	if strings.HasSuffix(prefix, "/configmaps/") {
		return 10_000, nil
	}
	return 0, nil
}

// TestListWidth: a gRPC List asks flow control for the seats the REST
// list would take — 10 for a list of 10,000 ConfigMaps, 1 for one that
// names an object, 2 for a 100-object page read from the store
// (resourceVersionMatch=Exact: twice its limit) — and a Get for one.
func TestListWidth(t *testing.T) {
	fc := &widthRecorder{}
	work := worksize.NewTracker(registry.New(registry.Core()...), tenThousandConfigMaps{}, 0, nil)
	work.Refresh(t.Context())
	c := client(t, serveConfig(t, Config{Authorizer: testPolicy(), Resources: &recordingService{},
		FlowControl: flowcontrolclient.New(fc, "test", nil), WorkSize: work}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alice := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer alice-token")
	ref := &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "default"}
	for _, req := range []*apiv1.ListRequest{
		{Ref: ref},
		{Ref: ref, FieldSelector: "metadata.name=cm"},
		{Ref: ref, Limit: 100, ResourceVersion: "5", ResourceVersionMatch: "Exact"},
	} {
		s, err := c.List(alice, req)
		if err != nil {
			t.Fatal(err)
		}
		for err == nil {
			_, err = s.Recv()
		}
	}
	if _, err := c.Get(alice, &apiv1.GetRequest{Ref: &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "default", Name: "cm"}}); err != nil {
		t.Fatal(err)
	}
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if want := []uint32{10, 1, 2, 1}; !slices.Equal(fc.widths, want) {
		t.Fatalf("widths asked %v, want %v", fc.widths, want)
	}
}
