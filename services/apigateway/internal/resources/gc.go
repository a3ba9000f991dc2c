package resources

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/protolist"
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

// gcListPage is how many keys the collector's (re)synchronising list reads
// per store round trip.
const gcListPage = 1000

// RunGarbageCollector collects garbage until ctx ends, as
// kube-controller-manager's garbage collector does for owner references:
//
//   - a dependent none of whose owners exists any more (by uid) is deleted
//     (Background propagation); a namespaced owner must be in the
//     dependent's namespace, and an owner of a kind not served here, or a
//     namespaced owner of a cluster-scoped dependent, cannot be resolved
//     and never gets its dependent collected;
//   - an owner being deleted with the foregroundDeletion finalizer has its
//     dependents deleted first, and loses the finalizer once they are gone;
//   - an owner being deleted with the orphan finalizer has its owner
//     reference removed from its dependents, then loses the finalizer.
//
// It follows every change through one store watch of the whole registry
// and reconciles only the objects a change touches, so its cost is per
// write (reading a few metadata fields, see protolist.Object.Meta), not per
// stored object. Its memory holds the objects that take part in garbage
// collection (gcGraph), not the cluster. An action that fails is retried
// every retry interval; a watch that fails (a compaction, a store
// restart) rebuilds the graph from a list.
//
// Every action is guarded by the object's uid or resourceVersion, so
// several gateway replicas may collect at once.
func (s *Server) RunGarbageCollector(ctx context.Context, retry time.Duration) {
	ctx = identity.WithUser(ctx, garbageCollector)
	c := &collector{s: s, retry: retry, byPrefix: map[string]*registry.Resource{}, byGVK: map[schema.GroupVersionKind]*registry.Resource{}}
	for _, gv := range s.cfg.Registry.GroupVersions() {
		for _, res := range s.cfg.Registry.Resources(gv) {
			if _, ok := c.byPrefix[res.KeyPrefix("")]; !ok {
				c.byPrefix[res.KeyPrefix("")] = res // as Registry.ForKey
			}
			c.byGVK[res.GVK()] = res
		}
	}
	for ctx.Err() == nil {
		err := c.run(ctx)
		if ctx.Err() != nil {
			return
		}
		s.cfg.Logger.Warn("garbage collector: resynchronising", "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
}

// collector is the garbage collector's state; one goroutine owns it.
type collector struct {
	s        *Server
	retry    time.Duration
	byPrefix map[string]*registry.Resource // KeyPrefix("") → resource: the key spaces to list
	byGVK    map[schema.GroupVersionKind]*registry.Resource
	g        *gcGraph
}

// run builds the graph from a list and follows the store's changes from
// there until the watch fails.
func (c *collector) run(ctx context.Context) error {
	rev, err := c.resync(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := c.s.cfg.Store.Watch(ctx, registry.KeyRoot, rev+1, false)
	if err != nil {
		return err
	}
	defer w.Close()
	batches := make(chan storage.WatchBatch)
	failed := make(chan error, 1)
	go func() {
		for {
			b, err := w.Recv()
			if err != nil {
				failed <- err
				return
			}
			select {
			case batches <- b:
			case <-ctx.Done():
				return
			}
		}
	}()
	tick := time.NewTicker(c.retry)
	defer tick.Stop()
	c.reconcile(ctx)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-failed:
			return err
		case b := <-batches:
			for _, ev := range b.Events {
				c.apply(ev)
			}
			c.reconcile(ctx)
		case <-tick.C:
			c.g.retryFailed()
			c.reconcile(ctx)
		}
	}
}

// resync rebuilds the graph from one consistent snapshot and returns its
// revision. A first pass finds the dependents and the owners being
// deleted; a second, only when there are dependents, the owners they
// name (reading every key's metadata twice beats holding every object's
// identity in memory).
func (c *collector) resync(ctx context.Context) (int64, error) {
	c.g = newGCGraph()
	c.s.objHints.clear() // changes since the last watch went unobserved
	rev, err := c.s.cfg.Store.Revision(ctx, false)
	if err != nil {
		return 0, err
	}
	for pass := range 2 {
		if pass == 1 && len(c.g.deps) == 0 {
			break
		}
		for prefix, res := range c.byPrefix {
			err := c.scan(ctx, res, prefix, rev, func(key string, m protolist.Meta) {
				if pass == 0 || len(c.g.deps[m.UID]) > 0 {
					c.g.put(res, key, m)
				}
			})
			if err != nil {
				return 0, err
			}
		}
	}
	for key := range c.g.nodes {
		c.g.dirty[key] = true
	}
	return rev, nil
}

// scan calls f with every key under prefix at revision rev, a page at a
// time.
func (c *collector) scan(ctx context.Context, res *registry.Resource, prefix string, rev int64, f func(string, protolist.Meta)) error {
	read := func(ctx context.Context, o storage.ListOptions) (storage.ListResult, error) {
		return c.s.cfg.Store.List(ctx, prefix, o)
	}
	_, err := scanKVs(ctx, true, storage.ListOptions{ReadOptions: storage.ReadOptions{Revision: rev}}, 0, 0, gcListPage, read, func(kv storage.KV) (bool, error) {
		m, err := readMeta(res, kv.Value)
		if err != nil {
			c.s.cfg.Logger.Warn("garbage collector: unreadable object", "key", kv.Key, "error", err)
			return false, nil
		}
		f(kv.Key, m)
		return true, nil
	})
	return err
}

// readMeta reads what the collector needs of a stored object of res
// without decoding it.
func readMeta(res *registry.Resource, value []byte) (protolist.Meta, error) {
	o, err := protolist.Parse(value, res.GVK())
	if err != nil {
		return protolist.Meta{}, err
	}
	return o.Meta()
}

// apply folds one change into the graph.
//
// The collector's watch is the gateway's one view of every change the
// store makes, so it also tells the update hints (objhints.go).
func (c *collector) apply(ev storage.Event) {
	c.s.objHints.observe(ev.KV.Key, ev.KV.ModRevision)
	res := c.s.cfg.Registry.ForKey(ev.KV.Key)
	if res == nil {
		return
	}
	switch ev.Type {
	case storage.Put:
		m, err := readMeta(res, ev.KV.Value)
		if err != nil {
			c.s.cfg.Logger.Warn("garbage collector: unreadable object", "key", ev.KV.Key, "error", err)
			return
		}
		c.g.put(res, ev.KV.Key, m)
	case storage.Delete:
		c.g.remove(ev.KV.Key)
	}
}

// reconcile acts on every dirty object. An action that fails leaves its
// object for the next retry.
func (c *collector) reconcile(ctx context.Context) {
	for len(c.g.dirty) > 0 && ctx.Err() == nil {
		var key string
		for key = range c.g.dirty {
			break
		}
		delete(c.g.dirty, key)
		n := c.g.nodes[key]
		if n == nil {
			continue
		}
		if err := c.reconcileNode(ctx, n); err != nil {
			c.g.failed[key] = true
			if ctx.Err() == nil {
				c.s.cfg.Logger.Warn("garbage collector", "key", key, "error", err)
			}
		}
	}
}

func (c *collector) reconcileNode(ctx context.Context, n *gcNode) error {
	if len(n.meta.OwnerReferences) > 0 && !n.meta.Deleting {
		alive, err := c.hasOwner(ctx, n)
		if err != nil {
			return err
		}
		if !alive {
			return c.s.gcDelete(ctx, n)
		}
	}
	if !n.meta.Deleting {
		return nil
	}
	var deps []*gcNode
	for key := range c.g.deps[n.meta.UID] {
		if d := c.g.nodes[key]; d != nil && c.ownedBy(d, n) {
			deps = append(deps, d)
		}
	}
	var errs []error
	switch {
	case slices.Contains(n.meta.Finalizers, metav1.FinalizerOrphanDependents):
		for _, d := range deps {
			errs = append(errs, c.s.gcOrphan(ctx, d, n.meta.UID))
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
		return c.s.gcDropFinalizer(ctx, n, metav1.FinalizerOrphanDependents)
	case slices.Contains(n.meta.Finalizers, metav1.FinalizerDeleteDependents):
		if len(deps) == 0 {
			return c.s.gcDropFinalizer(ctx, n, metav1.FinalizerDeleteDependents)
		}
		for _, d := range deps {
			if !d.meta.Deleting {
				errs = append(errs, c.s.gcDelete(ctx, d))
			}
		}
	}
	return errors.Join(errs...)
}

// hasOwner reports whether one of dependent n's owners exists. An owner the
// graph does not hold yet is read from the store (linearizably, so it is at
// least as new as the change that named it) and, when it exists, joins the
// graph, which from then on follows it.
func (c *collector) hasOwner(ctx context.Context, n *gcNode) (bool, error) {
	for _, ref := range n.meta.OwnerReferences {
		res := c.byGVK[schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind)]
		if res == nil || res.Namespaced && !n.res.Namespaced {
			return true, nil // unresolvable: never collected on its account
		}
		if o := c.g.byUID[ref.UID]; o != nil {
			if c.ownedBy(n, o) {
				return true, nil
			}
			continue
		}
		ns := ""
		if res.Namespaced {
			ns = n.meta.Namespace
		}
		key := res.Key(ns, ref.Name)
		kv, _, err := c.s.cfg.Store.Get(ctx, key, storage.ReadOptions{})
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return false, err
		}
		m, err := readMeta(res, kv.Value)
		if err != nil {
			return false, fmt.Errorf("garbage collector: %s: %w", key, err)
		}
		if m.UID == ref.UID {
			c.g.put(res, key, m)
			return true, nil
		}
	}
	return false, nil
}

// ownedBy reports whether owner o can own dependent d: a namespaced owner
// only in d's namespace.
func (c *collector) ownedBy(d, o *gcNode) bool {
	return !o.res.Namespaced || o.meta.Namespace == d.meta.Namespace
}

func gcRef(n *gcNode) *apiv1.ResourceRef {
	return &apiv1.ResourceRef{Group: n.res.GVR.Group, Version: n.res.GVR.Version, Resource: n.res.GVR.Resource, Namespace: n.meta.Namespace, Name: n.meta.Name}
}

// gcDelete deletes a dependent in the background, guarded by its uid so a
// new object of the same name is never collected by mistake.
func (s *Server) gcDelete(ctx context.Context, n *gcNode) error {
	uid := n.meta.UID
	_, err := s.deleteOne(ctx, deleteRequest{res: n.res, ref: gcRef(n), opts: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// gcOrphan removes the owner reference to owner from dependent d.
func (s *Server) gcOrphan(ctx context.Context, d *gcNode, owner types.UID) error {
	return s.gcUpdate(ctx, d, func(acc metav1.Object) {
		acc.SetOwnerReferences(slices.DeleteFunc(acc.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == owner }))
	})
}

// gcDropFinalizer removes finalizer f from an owner being deleted; without
// finalizers left, the update removes it.
func (s *Server) gcDropFinalizer(ctx context.Context, n *gcNode, f string) error {
	return s.gcUpdate(ctx, n, func(acc metav1.Object) {
		acc.SetFinalizers(slices.DeleteFunc(acc.GetFinalizers(), func(x string) bool { return x == f }))
	})
}

// gcUpdate changes the current state of n's object with change, unless it
// is by now another object of the same name.
func (s *Server) gcUpdate(ctx context.Context, n *gcNode, change func(metav1.Object)) error {
	_, err := s.updateLoop(ctx, n.res, gcRef(n), "", false, func(old runtime.Object) (runtime.Object, error) {
		obj := old.DeepCopyObject()
		acc, err := meta.Accessor(obj)
		if err != nil {
			return nil, err
		}
		if acc.GetUID() != n.meta.UID {
			return nil, apierrors.NewNotFound(n.res.GVR.GroupResource(), n.meta.Name)
		}
		change(acc)
		return obj, nil
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
