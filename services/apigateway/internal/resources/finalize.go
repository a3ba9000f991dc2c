package resources

import (
	"context"
	"errors"
	"fmt"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// removeFinalized removes an object whose last finalizer an update just
// took away. It returns storage.ErrConflict (unconverted) when the object
// changed meanwhile, so the update loop can retry.
func (s *Server) removeFinalized(ctx context.Context, res *registry.Resource, ref *apiv1.ResourceRef, modRev int64) error {
	_, err := s.cfg.Store.Delete(ctx, res.Key(ref.GetNamespace(), ref.GetName()), modRev)
	if err == nil || errors.Is(err, storage.ErrConflict) {
		return err
	}
	return storageError(err, res, ref.GetNamespace(), ref.GetName())
}

// checkNamespaceActive refuses to create an object in a namespace that is
// being deleted, as kube-apiserver's NamespaceLifecycle admission does
// (403). A namespace that does not exist is left to the create's own
// transaction, which fails it with a 404 atomically.
func (s *Server) checkNamespaceActive(ctx context.Context, res *registry.Resource, ns, name string) error {
	if !res.Namespaced || ns == "" {
		return nil
	}
	kv, _, err := s.cfg.Store.Get(ctx, namespaceKey(s, ns), storage.ReadOptions{Serializable: true})
	if errors.Is(err, storage.ErrNotFound) {
		return nil
	}
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	var nsObj corev1.Namespace
	if err := s.cfg.Codec.DecodeStorage(kv.Value, kv.ModRevision, &nsObj); err != nil {
		return apierrors.NewInternalError(err)
	}
	if nsObj.DeletionTimestamp != nil || nsObj.Status.Phase == corev1.NamespaceTerminating {
		return apierrors.NewForbidden(res.GVR.GroupResource(), name,
			fmt.Errorf("unable to create new content in namespace %s because it is being terminated", ns))
	}
	return nil
}
