package server

import (
	"errors"

	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	"github.com/meridian-cp/meridian/services/watchfanout/internal/cache"
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

// watchError is the Status of an ERROR frame.
func watchError(err error) metav1.Status {
	var expired *cache.ExpiredError
	switch {
	case errors.As(err, &expired):
		return apierrors.NewResourceExpired(expired.Error()).Status()
	case errors.Is(err, cache.ErrTooSlow):
		return apierrors.NewTooManyRequests("the watcher fell behind; re-watch from the resourceVersion of the last event received", 1).Status()
	case errors.Is(err, cache.ErrReset):
		return apierrors.NewResourceExpired("the watch cache re-listed from the store: too old resource version").Status()
	}
	return apiStatus(err)
}
