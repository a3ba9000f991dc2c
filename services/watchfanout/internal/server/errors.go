package server

import (
	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// apiStatus returns the Kubernetes Status of err.
func apiStatus(err error) metav1.Status { return apistatus.FromError(err) }

// toGRPC converts err to a gRPC status error carrying a meridian.api.v1
// Status detail, as watch.v1 promises for errors before a stream starts
// and for unary calls.
func toGRPC(err error) error { return apistatus.ToGRPC(err) }

// tooLargeResourceVersion is the 504 for a resourceVersion the cache has
// not reached in time.
func tooLargeResourceVersion(requested, current int64) error {
	return apistatus.TooLargeResourceVersion(requested, current)
}

// notSynced is the 503 served before the cache has synced with the store.
func notSynced() error {
	return apierrors.NewServiceUnavailable("the watch cache is not synced with the store yet")
}
