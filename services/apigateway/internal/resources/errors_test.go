package resources

import (
	"errors"
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
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
)

// TestStoreUnreachableIsRetriable: a request the store could not serve —
// no leader, or a member that stopped answering (the store client's
// DEADLINE_EXCEEDED) — answers the client with a retriable Kubernetes
// error, not a 500 InternalError. It carries Retry-After unless it is a
// write that may have been applied, which client-go would otherwise send
// again by itself; other store errors are unchanged, and so is a gRPC
// error of something else than the store (a KMS plugin's, say).
func TestStoreUnreachableIsRetriable(t *testing.T) {
	cms, _ := registry.New(registry.Core()...).Lookup(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	noLeader := status.Error(codes.Unavailable, "server: no reachable leader")
	silent := status.Error(codes.DeadlineExceeded, "store: member 10.0.0.1:2479 stopped answering")
	for _, tc := range []struct {
		name   string
		err    error // as package storage returns it
		code   int32
		reason metav1.StatusReason
		retry  int32
	}{
		{"no leader", &storage.UnreachableError{Err: noLeader}, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, storeRetryAfter},
		{"silent member", &storage.UnreachableError{Err: silent}, http.StatusGatewayTimeout, metav1.StatusReasonTimeout, storeRetryAfter},
		{"write lost with its leader", &storage.UnreachableError{Err: noLeader, MayHaveApplied: true}, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, 0},
		{"write unanswered", &storage.UnreachableError{Err: silent, MayHaveApplied: true}, http.StatusGatewayTimeout, metav1.StatusReasonTimeout, 0},
		{"other", fmt.Errorf("storage: %w", status.Error(codes.Internal, "boom")), http.StatusInternalServerError, metav1.StatusReasonInternalError, 0},
		{"not the store", fmt.Errorf("decrypt: kms plugin: %w", status.Error(codes.Unavailable, "connection refused")), http.StatusInternalServerError, metav1.StatusReasonInternalError, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for name, err := range map[string]error{"object": storageError(tc.err, cms, "ns", "x"), "collection": storageErrorNoResource(tc.err)} {
				st, ok := err.(apierrors.APIStatus)
				if !ok {
					t.Fatalf("%s: %T, want an API status", name, err)
				}
				s := st.Status()
				var retry int32
				if s.Details != nil {
					retry = s.Details.RetryAfterSeconds
				}
				if s.Code != tc.code || s.Reason != tc.reason || retry != tc.retry {
					t.Errorf("%s: %d %s retry-after %d, want %d %s retry-after %d", name, s.Code, s.Reason, retry, tc.code, tc.reason, tc.retry)
				}
				if s.Code != http.StatusInternalServerError && !strings.Contains(s.Message, status.Convert(errors.Unwrap(tc.err)).Message()) {
					t.Errorf("%s: message %q does not say what the store said", name, s.Message)
				}
			}
		})
	}
}
