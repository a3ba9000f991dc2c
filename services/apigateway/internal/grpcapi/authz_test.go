package grpcapi

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/flowcontrolclient"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// grantingFlowControl is a flow-control service that counts the seats
// asked of it and grants them all.
type grantingFlowControl struct {
	flowcontrolv1.FlowControlServiceClient
	acquires atomic.Int32
}

func (f *grantingFlowControl) Acquire(context.Context, *flowcontrolv1.AcquireRequest, ...grpc.CallOption) (*flowcontrolv1.AcquireResponse, error) {
	f.acquires.Add(1)
	return &flowcontrolv1.AcquireResponse{Grant: &flowcontrolv1.Grant{Exempt: true}}, nil
}

// TestAuthorization: gRPC calls are authorized as REST requests are, by
// their ref and method: a refused call is PermissionDenied carrying
// kube-apiserver's 403 Status, reaches neither flow control nor the
// service; a list whose field selector names one object is about that
// object.
func TestAuthorization(t *testing.T) {
	svc := &recordingService{}
	fc := &grantingFlowControl{}
	c := client(t, serveWith(t, svc, flowcontrolclient.New(fc, "test", nil)))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	alice := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer alice-token")
	other := &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "other"}

	for _, tc := range []struct {
		name    string
		call    func() error
		message string
	}{
		{"get elsewhere", func() error {
			_, err := c.Get(alice, &apiv1.GetRequest{Ref: &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "other", Name: "cm"}})
			return err
		}, `configmaps "cm" is forbidden: User "alice" cannot get resource "configmaps" in API group "" in the namespace "other"`},
		{"create elsewhere", func() error {
			_, err := c.Create(alice, &apiv1.CreateRequest{Ref: other, Body: &httpbody.HttpBody{ContentType: "application/json", Data: []byte(`{}`)}})
			return err
		}, `configmaps is forbidden: User "alice" cannot create resource "configmaps" in API group "" in the namespace "other"`},
		{"delete a granted kind", func() error {
			_, err := c.Delete(alice, &apiv1.DeleteRequest{Ref: &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "default", Name: "cm"}})
			return err
		}, `configmaps "cm" is forbidden: User "alice" cannot delete resource "configmaps" in API group "" in the namespace "default"`},
		{"list elsewhere", func() error {
			s, err := c.List(alice, &apiv1.ListRequest{Ref: other, FieldSelector: "metadata.name=cm"})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		}, `configmaps "cm" is forbidden: User "alice" cannot list resource "configmaps" in API group "" in the namespace "other"`},
	} {
		err := tc.call()
		st := apistatus.FromGRPC(status.Convert(err))
		if status.Code(err) != codes.PermissionDenied || st.Reason != metav1.StatusReasonForbidden || st.Code != 403 || st.Message != tc.message {
			t.Errorf("%s: %v, want PermissionDenied %q", tc.name, err, tc.message)
		}
	}
	if fc.acquires.Load() != 0 || len(svc.calls()) != 0 {
		t.Errorf("refused calls asked flow control %d times and reached the service %d times", fc.acquires.Load(), len(svc.calls()))
	}
	if _, err := c.Get(alice, &apiv1.GetRequest{Ref: &apiv1.ResourceRef{Version: "v1", Resource: "configmaps", Namespace: "default", Name: "cm"}}); err != nil {
		t.Errorf("alice's get in default: %v", err)
	}
	if fc.acquires.Load() != 1 {
		t.Errorf("an allowed call asked flow control %d times, want 1", fc.acquires.Load())
	}
}
