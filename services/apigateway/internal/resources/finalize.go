package resources

import (
	"context"
	"errors"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
)

// removeFinalized removes an object whose last finalizer an update just
// took away. It returns storage.ErrConflict (unconverted) when the object
// changed meanwhile, so the update loop can retry.
func (s *Server) removeFinalized(ctx context.Context, res *registry.Resource, ref *apiv1.ResourceRef, modRev int64) error {
	_, err := s.cfg.Store.Delete(ctx, res.Key(ref.GetNamespace(), ref.GetName()), modRev)
	if err == nil && s.cfg.Quota != nil {
		s.cfg.Quota.Replenish(ref.GetNamespace(), res.GVR.GroupResource())
	}
	if err == nil || errors.Is(err, storage.ErrConflict) {
		return err
	}
	return storageError(err, res, ref.GetNamespace(), ref.GetName())
}
