package resources

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/meridian-cp/meridian/lib/kube/registry"
)

// TestStoreUnreachableIsRetriable: a request the store could not serve —
// no leader, or a member that stopped answering (the store client's
// DEADLINE_EXCEEDED) — answers the client with a retriable Kubernetes
// error carrying Retry-After, not a 500 InternalError; other store errors
// are unchanged.
func TestStoreUnreachableIsRetriable(t *testing.T) {
	cms, _ := registry.New(registry.Core()...).Lookup(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	for _, tc := range []struct {
		name   string
		err    error
		code   int32
		reason metav1.StatusReason
		retry  int32
	}{
		{"no leader", status.Error(codes.Unavailable, "server: no reachable leader"), http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, storeRetryAfter},
		{"silent member", status.Error(codes.DeadlineExceeded, "store: member 10.0.0.1:2479 stopped answering"), http.StatusGatewayTimeout, metav1.StatusReasonTimeout, storeRetryAfter},
		{"other", status.Error(codes.Internal, "boom"), http.StatusInternalServerError, metav1.StatusReasonInternalError, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// As package storage returns it.
			wrapped := fmt.Errorf("storage: %w", tc.err)
			for name, err := range map[string]error{"object": storageError(wrapped, cms, "ns", "x"), "collection": storageErrorNoResource(wrapped)} {
				st, ok := err.(apierrors.APIStatus)
				if !ok {
					t.Fatalf("%s: %T, want an API status", name, err)
				}
				s := st.Status()
				if s.Code != tc.code || s.Reason != tc.reason || s.Details.RetryAfterSeconds != tc.retry {
					t.Errorf("%s: %d %s retry-after %d, want %d %s retry-after %d", name, s.Code, s.Reason, s.Details.RetryAfterSeconds, tc.code, tc.reason, tc.retry)
				}
				if tc.retry > 0 && !strings.Contains(s.Message, status.Convert(tc.err).Message()) {
					t.Errorf("%s: message %q does not say what the store said", name, s.Message)
				}
			}
		})
	}
}
