package resources

import (
	"errors"
	"fmt"
	"github.com/meridian-cp/meridian/lib/kube/apistatus"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
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
	return apierrors.NewInternalError(err)
}

const conflictMessage = "the object has been modified; please apply your changes to the latest version and try again"

// storageErrorNoResource converts a storage error that concerns no
// particular object.
func storageErrorNoResource(err error) error {
	var compacted *storage.CompactedError
	if errors.As(err, &compacted) {
		return apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", compacted.Requested, compacted.CompactRevision))
	}
	return apierrors.NewInternalError(err)
}
