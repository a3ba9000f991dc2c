package app

import (
	"context"
	"log/slog"
	"sync"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meridian-cp/meridian/lib/kube/rbac"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/admission/internal/storecache"
)

// followRBAC follows the Roles, ClusterRoles, RoleBindings and
// ClusterRoleBindings from the store into an RBAC authorizer, the one
// that answers CEL's `authorizer` for the requesting user, and returns the
// channels closed once each kind has first been read. Decisions made
// before the first publish wait for it, for as long as the request's
// context allows, rather than deny on a partial view.
func followRBAC(ctx context.Context, st storecache.Store, decrypt storecache.Decrypt, logger *slog.Logger) (*rbac.RBAC, []<-chan struct{}, error) {
	reg := registry.New(registry.RBAC()...)
	gv := rbacv1.SchemeGroupVersion
	var kinds []*registry.Resource
	for _, name := range []string{"clusterroles", "roles", "clusterrolebindings", "rolebindings"} {
		res, _ := reg.Lookup(gv.WithResource(name))
		kinds = append(kinds, res)
	}
	f := newRBACFollower(len(kinds))
	var cache *storecache.Cache
	var err error
	// The cache calls changed only from its followers, which Follow starts
	// after cache is set.
	if cache, err = storecache.New(ctx, st, decrypt, logger, func(res *registry.Resource) {
		f.changed(res.GVR.Resource, cache.List(res, "", nil))
	}); err != nil {
		return nil, nil, err
	}
	var synced []<-chan struct{}
	for _, res := range kinds {
		synced = append(synced, cache.Follow(res))
	}
	return f.authz, synced, nil
}

// rbacFollower applies the RBAC objects of a cache to an RBAC authorizer
// change by change: the objects of a kind that changed are compared with
// those last applied (the cache replaces an object's pointer when it
// changes), only the ones added, changed or removed are applied, and
// the next policy is built from the last one, copying only what they
// touched (rbac.Objects). A change of one RoleBinding so rebuilds one
// namespace's bindings, not the whole policy.
//
// The first policy is published once every kind has been read, so that
// no decision is made on a partial view.
type rbacFollower struct {
	authz *rbac.RBAC
	kinds int // how many kinds must be read before the first publish

	// mu orders the changes (the cache calls changed from one goroutine
	// per kind) and guards what follows: objects is owned by the
	// follower, as Publish requires.
	mu      sync.Mutex
	objects *rbac.Objects
	// applied holds, per resource (roles, clusterroles, rolebindings,
	// clusterrolebindings), the objects last applied by namespace/name.
	applied   map[string]map[string]runtime.Object
	published bool
}

func newRBACFollower(kinds int) *rbacFollower {
	return &rbacFollower{authz: rbac.New(), kinds: kinds, objects: rbac.NewObjects(), applied: map[string]map[string]runtime.Object{}}
}

// changed applies objs, every object of resource now, and publishes the
// resulting policy once every kind has been read.
func (f *rbacFollower) changed(resource string, objs []runtime.Object) {
	f.mu.Lock()
	defer f.mu.Unlock()
	prev := f.applied[resource]
	next := make(map[string]runtime.Object, len(objs))
	for _, obj := range objs {
		m, ok := obj.(metav1.Object)
		if !ok {
			continue
		}
		key := m.GetNamespace() + "/" + m.GetName()
		next[key] = obj
		if prev[key] != obj {
			f.objects.Put(obj)
		}
	}
	for key, obj := range prev {
		if _, ok := next[key]; !ok {
			m := obj.(metav1.Object)
			f.objects.Remove(resource, m.GetNamespace(), m.GetName())
		}
	}
	f.applied[resource] = next
	if len(f.applied) < f.kinds {
		return
	}
	f.authz.Publish(f.objects, 0, !f.published)
	f.published = true
}
