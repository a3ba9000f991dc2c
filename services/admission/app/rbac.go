package app

import (
	"context"
	"log/slog"
	"sync"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/meridian-cp/meridian/lib/kube/rbac"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/admission/internal/storecache"
)

// followRBAC follows the Roles, ClusterRoles, RoleBindings and
// ClusterRoleBindings from the store into an RBAC authorizer, the one
// that answers CEL's `authorizer` for the requesting user, and returns the
// channels closed once each kind has first been read.
//
// Once every kind has been read, each change publishes a policy built
// anew from every RBAC object the cache holds (RBAC objects change
// rarely; the gateways' authorizer follows them incrementally). Decisions
// made before the first publish wait for it, for as long as the request's
// context allows, rather than deny on a partial view.
func followRBAC(ctx context.Context, st storecache.Store, decrypt storecache.Decrypt, logger *slog.Logger) (*rbac.RBAC, []<-chan struct{}, error) {
	reg := registry.New(registry.RBAC()...)
	gv := rbacv1.SchemeGroupVersion
	var kinds []*registry.Resource
	for _, name := range []string{"clusterroles", "roles", "clusterrolebindings", "rolebindings"} {
		res, _ := reg.Lookup(gv.WithResource(name))
		kinds = append(kinds, res)
	}
	authz := rbac.New()
	var (
		cache *storecache.Cache
		// mu orders the publishes (the cache calls publish from one
		// goroutine per kind) and guards read.
		mu sync.Mutex
		// read holds the kinds read at least once.
		read = map[*registry.Resource]bool{}
	)
	publish := func(changed *registry.Resource) {
		mu.Lock()
		defer mu.Unlock()
		read[changed] = true
		if len(read) < len(kinds) {
			return
		}
		o := rbac.NewObjects()
		for _, res := range kinds {
			for _, obj := range cache.List(res, "", nil) {
				o.Put(obj)
			}
		}
		authz.Publish(o, 0, true)
	}
	var err error
	// The cache calls publish only from its followers, which Follow starts
	// after cache is set.
	if cache, err = storecache.New(ctx, st, decrypt, logger, publish); err != nil {
		return nil, nil, err
	}
	var synced []<-chan struct{}
	for _, res := range kinds {
		synced = append(synced, cache.Follow(res))
	}
	return authz, synced, nil
}
