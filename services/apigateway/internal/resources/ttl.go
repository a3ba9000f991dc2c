package resources

import (
	"context"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// leaseFor returns the store lease a write of res attaches its object to:
// 0 for kinds that do not expire; for kinds with a TTL (Events), a shared
// lease that ends the object TTL after this write.
func (s *Server) leaseFor(ctx context.Context, res *registry.Resource) (int64, error) {
	if res.TTL <= 0 {
		return 0, nil
	}
	id, err := s.cfg.Store.Lease(ctx, res.TTL)
	if err != nil {
		return 0, apierrors.NewInternalError(err)
	}
	return id, nil
}
