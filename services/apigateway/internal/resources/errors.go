package resources

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
)

// storageError converts a storage error about object name of res to the
// Kubernetes error a client expects.
func storageError(err error, res *registry.Resource, ns, name string) error {
	gr := res.GVR.GroupResource()
	var compacted *storage.CompactedError
	var future *storage.FutureRevisionError
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return apierrors.NewNotFound(gr, name)
	case errors.Is(err, storage.ErrExists):
		return apierrors.NewAlreadyExists(gr, name)
	case errors.Is(err, storage.ErrConflict):
		return apierrors.NewConflict(gr, name, errors.New(conflictMessage))
	case errors.Is(err, storage.ErrParentMissing):
		return apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, ns)
	case errors.As(err, &compacted):
		return apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", compacted.Requested, compacted.CompactRevision))
	case errors.As(err, &future):
		return apistatus.TooLargeResourceVersion(future.Requested, future.Current)
	}
	if retry := storeUnreachable(err); retry != nil {
		return retry
	}
	return apierrors.NewInternalError(err)
}

// storeRetryAfter is the Retry-After of the errors of storeUnreachable:
// about an election, after which another member leads.
const storeRetryAfter = 2

// storeUnreachable is the error a client gets when the store could not
// serve the request, nil for other errors: 503 ServiceUnavailable when no
// member could take it (no leader, the leadership lost before the request
// was answered), 504 Timeout when the member it was sent to stopped
// answering (the store client gives up on such a member within seconds)
// or the request ran out of time.
//
// Retry-After goes only on requests that are safe to send again: reads,
// and writes the store proves were never proposed. client-go resends a
// write on its own when a 5xx carries Retry-After, so a write that may
// have been committed gets none: the caller sees the error, and its next
// attempt can read the object first instead of meeting its own create as
// AlreadyExists or its own update as a Conflict.
func storeUnreachable(err error) error {
	var ue *storage.UnreachableError
	if !errors.As(err, &ue) {
		return nil
	}
	st := status.Convert(ue.Err)
	retryAfter, note := int32(storeRetryAfter), ""
	if ue.MayHaveApplied {
		retryAfter, note = 0, " (the write may have been applied: read the object before sending it again)"
	}
	switch st.Code() {
	case codes.Unavailable:
		e := apierrors.NewServiceUnavailable("the store is unavailable: " + st.Message() + note)
		if retryAfter > 0 {
			e.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: retryAfter}
		}
		return e
	case codes.DeadlineExceeded:
		return apierrors.NewTimeoutError("the store did not answer in time: "+st.Message()+note, int(retryAfter))
	}
	return nil
}

const conflictMessage = "the object has been modified; please apply your changes to the latest version and try again"

// storageErrorNoResource converts a storage error that concerns no
// particular object.
func storageErrorNoResource(err error) error {
	var compacted *storage.CompactedError
	if errors.As(err, &compacted) {
		return apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", compacted.Requested, compacted.CompactRevision))
	}
	if retry := storeUnreachable(err); retry != nil {
		return retry
	}
	return apierrors.NewInternalError(err)
}
