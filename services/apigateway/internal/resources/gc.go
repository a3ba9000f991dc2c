package resources

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// garbageCollector is the identity the garbage collector acts as.
var garbageCollector = identity.User{Name: "system:serviceaccount:kube-system:generic-garbage-collector", Groups: []string{"system:serviceaccounts", "system:authenticated"}}

// RunGarbageCollector collects garbage until ctx ends, every interval, as
// kube-controller-manager's garbage collector does for owner references:
//
//   - a dependent none of whose owners exists any more (by uid) is deleted
//     (Background propagation);
//   - an owner being deleted with the foregroundDeletion finalizer has its
//     dependents deleted first, and loses the finalizer once they are gone;
//   - an owner being deleted with the orphan finalizer has its owner
//     reference removed from its dependents, then loses the finalizer.
//
// It reads every object each round: fine for the sizes it serves today; an
// index of dependents by owner uid is the path past that.
func (s *Server) RunGarbageCollector(ctx context.Context, interval time.Duration) {
	ctx = identity.WithUser(ctx, garbageCollector)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := s.collectGarbage(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("garbage collector", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// gcObject is one object as the collector sees it.
type gcObject struct {
	res *registry.Resource
	obj runtime.Object
	acc metav1.Object
}

func (s *Server) collectGarbage(ctx context.Context) error {
	var all []gcObject
	byUID := map[types.UID]gcObject{}
	for _, gv := range s.cfg.Registry.GroupVersions() {
		for _, res := range s.cfg.Registry.Resources(gv) {
			page, err := s.cfg.Store.List(ctx, res.KeyPrefix(""), storage.ListOptions{ReadOptions: storage.ReadOptions{Serializable: true}})
			if err != nil {
				return err
			}
			for _, kv := range page.KVs {
				obj := res.New()
				if err := s.cfg.Codec.DecodeStorage(kv.Value, kv.ModRevision, obj); err != nil {
					return err
				}
				acc, _ := meta.Accessor(obj)
				o := gcObject{res: res, obj: obj, acc: acc}
				all = append(all, o)
				byUID[acc.GetUID()] = o
			}
		}
	}
	served := map[schema.GroupVersionKind]bool{}
	for _, gv := range s.cfg.Registry.GroupVersions() {
		for _, res := range s.cfg.Registry.Resources(gv) {
			served[res.GVK()] = true
		}
	}
	dependents := map[types.UID][]gcObject{}
	var errs []error
	for _, o := range all {
		refs := o.acc.GetOwnerReferences()
		if len(refs) == 0 {
			continue
		}
		alive := false
		for _, r := range refs {
			// An owner of a kind not served here cannot be looked up: never
			// collect on its account.
			if !served[schema.FromAPIVersionAndKind(r.APIVersion, r.Kind)] {
				alive = true
				continue
			}
			owner, ok := byUID[r.UID]
			if ok && owner.acc.GetNamespace() == o.acc.GetNamespace() || ok && !owner.res.Namespaced {
				alive = true
				dependents[r.UID] = append(dependents[r.UID], o)
			}
		}
		if !alive && o.acc.GetDeletionTimestamp() == nil {
			errs = append(errs, s.gcDelete(ctx, o))
		}
	}
	for _, owner := range all {
		if owner.acc.GetDeletionTimestamp() == nil {
			continue
		}
		fins := owner.acc.GetFinalizers()
		deps := dependents[owner.acc.GetUID()]
		switch {
		case slices.Contains(fins, metav1.FinalizerOrphanDependents):
			for _, d := range deps {
				errs = append(errs, s.gcOrphan(ctx, d, owner.acc.GetUID()))
			}
			errs = append(errs, s.gcDropFinalizer(ctx, owner, metav1.FinalizerOrphanDependents))
		case slices.Contains(fins, metav1.FinalizerDeleteDependents):
			if len(deps) == 0 {
				errs = append(errs, s.gcDropFinalizer(ctx, owner, metav1.FinalizerDeleteDependents))
				continue
			}
			for _, d := range deps {
				if d.acc.GetDeletionTimestamp() == nil {
					errs = append(errs, s.gcDelete(ctx, d))
				}
			}
		}
	}
	return errors.Join(errs...)
}

func gcRef(o gcObject) *apiv1.ResourceRef {
	return &apiv1.ResourceRef{Group: o.res.GVR.Group, Version: o.res.GVR.Version, Resource: o.res.GVR.Resource, Namespace: o.acc.GetNamespace(), Name: o.acc.GetName()}
}

// gcDelete deletes a dependent in the background, guarded by its uid so a
// new object of the same name is never collected by mistake.
func (s *Server) gcDelete(ctx context.Context, o gcObject) error {
	uid := o.acc.GetUID()
	_, err := s.deleteOne(ctx, deleteRequest{res: o.res, ref: gcRef(o), opts: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// gcOrphan removes the owner reference to owner from a dependent.
func (s *Server) gcOrphan(ctx context.Context, d gcObject, owner types.UID) error {
	_, err := s.updateLoop(ctx, d.res, gcRef(d), "", false, func(old runtime.Object) (runtime.Object, error) {
		obj := old.DeepCopyObject()
		acc, _ := meta.Accessor(obj)
		acc.SetOwnerReferences(slices.DeleteFunc(acc.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == owner }))
		return obj, nil
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// gcDropFinalizer removes finalizer f from an owner being deleted; without
// finalizers left, the update removes it.
func (s *Server) gcDropFinalizer(ctx context.Context, o gcObject, f string) error {
	_, err := s.updateLoop(ctx, o.res, gcRef(o), "", false, func(old runtime.Object) (runtime.Object, error) {
		obj := old.DeepCopyObject()
		acc, _ := meta.Accessor(obj)
		acc.SetFinalizers(slices.DeleteFunc(acc.GetFinalizers(), func(x string) bool { return x == f }))
		return obj, nil
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
