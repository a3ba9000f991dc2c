package apistatus_test

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/meridian-cp/meridian/lib/kube/apistatus"
)

// TestDetail: the Status ToGRPC attaches is found again; a status without
// one has none, whatever its code.
func TestDetail(t *testing.T) {
	err := apistatus.ToGRPC(apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, "x"))
	s, ok := apistatus.Detail(status.Convert(err))
	if !ok || s.GetCode() != 404 || s.GetReason() != "NotFound" || s.GetMessage() != `configmaps "x" not found` {
		t.Fatalf("Detail of a NotFound: %v %v", s, ok)
	}
	if s, ok := apistatus.Detail(status.New(codes.NotFound, "no detail")); ok {
		t.Fatalf("Detail of a bare NotFound: %v", s)
	}
}
