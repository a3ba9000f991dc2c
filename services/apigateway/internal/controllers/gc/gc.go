// Package gc is the gateway's garbage collector: it deletes the objects
// whose owners are gone and carries out foreground and orphan deletion,
// as kube-controller-manager's garbage collector does for owner
// references. It reads the store through Store and writes through
// Objects, the API's own delete and update, so that every action it takes
// is a write with the API's semantics (admission, validation, finalizers).
package gc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/protolist"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/reconcile"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Store is what the collector reads of the store (package storage
// describes each call). *storage.Store implements it.
type Store interface {
	// Revision returns the store's current revision.
	Revision(ctx context.Context, serializable bool) (int64, error)
	// List reads the keys under prefix, a page when opts has a Limit.
	List(ctx context.Context, prefix string, opts storage.ListOptions) (storage.ListResult, error)
	// Get reads one key; storage.ErrNotFound when it does not exist.
	Get(ctx context.Context, key string, opts storage.ReadOptions) (storage.KV, int64, error)
	// Watch follows the changes under prefix from startRevision.
	Watch(ctx context.Context, prefix string, startRevision int64, progress bool) (*storage.Watcher, error)
}

var _ Store = (*storage.Store)(nil)

// Objects writes objects as the API does, for the user in ctx, and returns
// Kubernetes errors (apierrors). *resources.Server implements it.
type Objects interface {
	reconcile.Deleter
	reconcile.Updater
}

// ChangeObserver is told of what the collector's watch sees. That watch
// is the gateway's one view of every change the store makes, so the API's
// update hints follow it (*resources.Server implements it).
type ChangeObserver interface {
	// ObserveChange reports that the store changed key at modRevision.
	ObserveChange(key string, modRevision int64)
	// ObserveResync reports that the collector rebuilds its view from a
	// list: changes since its last watch went unobserved.
	ObserveResync()
}

// Config configures a Collector.
type Config struct {
	// Registry is the set of served resources: the kinds collected and
	// the owners resolved. Required.
	Registry *registry.Registry
	// Store is the store the collector reads and watches. Required.
	Store Store
	// Objects carries out the collector's deletes and updates. Required.
	Objects Objects
	// Observer is told of every change the collector sees; nil: none.
	Observer ChangeObserver
	// Logger logs; nil means slog.Default().
	Logger *slog.Logger
	// Retry is how often actions that failed are retried, and how long a
	// failed watch waits before it is rebuilt; 0 means 2 seconds.
	Retry time.Duration
}

// Collector is the garbage collector; Run runs it.
type Collector struct {
	cfg Config
}

// New returns a Collector, or an error naming every required field cfg
// lacks.
func New(cfg Config) (*Collector, error) {
	if err := reconcile.Require("gc", reconcile.Registry(cfg.Registry), reconcile.Store(cfg.Store), reconcile.Objects(cfg.Objects)); err != nil {
		return nil, err
	}
	cfg.Logger, cfg.Retry = reconcile.Defaults(cfg.Logger, cfg.Retry, 2*time.Second)
	return &Collector{cfg: cfg}, nil
}

// keySpaces returns the key spaces to list, KeyPrefix("") → resource (as
// Registry.ForKey), of the resources served now: the built-in ones and
// the custom ones of the CRDs established so far.
func (c *Collector) keySpaces() map[string]*registry.Resource {
	out := map[string]*registry.Resource{}
	for _, res := range c.cfg.Registry.All() {
		if _, ok := out[res.KeyPrefix("")]; !ok {
			out[res.KeyPrefix("")] = res
		}
	}
	return out
}

// forKind returns the resource served now of an owner reference's kind,
// or nil.
func (c *Collector) forKind(gvk schema.GroupVersionKind) *registry.Resource {
	for _, res := range c.cfg.Registry.All() {
		if res.GVK() == gvk {
			return res
		}
	}
	return nil
}

// garbageCollector is the identity the garbage collector acts as.
var garbageCollector = identity.User{Name: "system:serviceaccount:kube-system:generic-garbage-collector", Groups: []string{"system:serviceaccounts", "system:authenticated"}}

// listPage is how many keys the collector's (re)synchronising list reads
// per store round trip.
const listPage = 1000

// Run collects garbage until ctx ends:
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
// collection (graph), not the cluster. An action that fails is retried
// every Retry; a watch that fails (a compaction, a store restart) rebuilds
// the graph from a list.
//
// Every action is guarded by the object's uid or resourceVersion, so
// several gateway replicas may collect at once.
func (c *Collector) Run(ctx context.Context) {
	ctx = identity.WithUser(ctx, garbageCollector)
	cs := &collector{Collector: c}
	for ctx.Err() == nil {
		err := cs.run(ctx)
		if ctx.Err() != nil {
			return
		}
		c.cfg.Logger.Warn("garbage collector: resynchronising", "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(c.cfg.Retry):
		}
	}
}

// collector is the state of a running Collector; one goroutine owns it.
type collector struct {
	*Collector
	g *graph
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
	w, err := c.cfg.Store.Watch(ctx, registry.KeyRoot, rev+1, false)
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
	tick := time.NewTicker(c.cfg.Retry)
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
	c.g = newGraph()
	if c.cfg.Observer != nil {
		c.cfg.Observer.ObserveResync()
	}
	rev, err := c.cfg.Store.Revision(ctx, false)
	if err != nil {
		return 0, err
	}
	for pass := range 2 {
		if pass == 1 && len(c.g.deps) == 0 {
			break
		}
		for prefix, res := range c.keySpaces() {
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

// scan calls f with every key under prefix at revision rev, listPage keys
// at a time: the first page read linearizably, the next ones from the
// answering member at the same revision.
func (c *collector) scan(ctx context.Context, res *registry.Resource, prefix string, rev int64, f func(string, protolist.Meta)) error {
	opts := storage.ListOptions{ReadOptions: storage.ReadOptions{Revision: rev}, Limit: listPage, SkipCount: true}
	for {
		page, err := c.cfg.Store.List(ctx, prefix, opts)
		if err != nil {
			return err
		}
		for _, kv := range page.KVs {
			m, err := readMeta(res, kv.Value)
			if err != nil {
				c.cfg.Logger.Warn("garbage collector: unreadable object", "key", kv.Key, "error", err)
				continue
			}
			f(kv.Key, m)
		}
		if !page.More || len(page.KVs) == 0 {
			return nil
		}
		opts.ReadOptions = storage.ReadOptions{Revision: page.Revision, Serializable: true}
		opts.Start = page.KVs[len(page.KVs)-1].Key + "\x00"
	}
}

// readMeta reads what the collector needs of a stored object of res
// without decoding it.
func readMeta(res *registry.Resource, value []byte) (protolist.Meta, error) {
	if res.Custom != nil {
		return customMeta(value)
	}
	o, err := protolist.Parse(value, res.GVK())
	if err != nil {
		return protolist.Meta{}, err
	}
	return o.Meta()
}

// apply folds one change into the graph, and tells the observer.
func (c *collector) apply(ev storage.Event) {
	if c.cfg.Observer != nil {
		c.cfg.Observer.ObserveChange(ev.KV.Key, ev.KV.ModRevision)
	}
	res := c.cfg.Registry.ForKey(ev.KV.Key)
	if res == nil {
		return
	}
	switch ev.Type {
	case storage.Put:
		if ev.Err != nil {
			// Its metadata cannot be read (a value that does not
			// decrypt): the graph keeps what it knew of the object.
			c.cfg.Logger.Warn("garbage collector: unreadable object", "key", ev.KV.Key, "error", ev.Err)
			return
		}
		m, err := readMeta(res, ev.KV.Value)
		if err != nil {
			c.cfg.Logger.Warn("garbage collector: unreadable object", "key", ev.KV.Key, "error", err)
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
				c.cfg.Logger.Warn("garbage collector", "key", key, "error", err)
			}
		}
	}
}

func (c *collector) reconcileNode(ctx context.Context, n *node) error {
	if len(n.meta.OwnerReferences) > 0 && !n.meta.Deleting {
		alive, err := c.hasOwner(ctx, n)
		if err != nil {
			return err
		}
		if !alive {
			return c.delete(ctx, n)
		}
	}
	if !n.meta.Deleting {
		return nil
	}
	var deps []*node
	for key := range c.g.deps[n.meta.UID] {
		if d := c.g.nodes[key]; d != nil && ownedBy(d, n) {
			deps = append(deps, d)
		}
	}
	var errs []error
	switch {
	case slices.Contains(n.meta.Finalizers, metav1.FinalizerOrphanDependents):
		for _, d := range deps {
			errs = append(errs, c.orphan(ctx, d, n.meta.UID))
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
		return c.dropFinalizer(ctx, n, metav1.FinalizerOrphanDependents)
	case slices.Contains(n.meta.Finalizers, metav1.FinalizerDeleteDependents):
		if len(deps) == 0 {
			return c.dropFinalizer(ctx, n, metav1.FinalizerDeleteDependents)
		}
		for _, d := range deps {
			if !d.meta.Deleting {
				errs = append(errs, c.delete(ctx, d))
			}
		}
	}
	return errors.Join(errs...)
}

// hasOwner reports whether one of dependent n's owners exists. An owner the
// graph does not hold yet is read from the store (linearizably, so it is at
// least as new as the change that named it) and, when it exists, joins the
// graph, which from then on follows it.
func (c *collector) hasOwner(ctx context.Context, n *node) (bool, error) {
	for _, ref := range n.meta.OwnerReferences {
		res := c.forKind(schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind))
		if res == nil || res.Namespaced && !n.res.Namespaced {
			return true, nil // unresolvable: never collected on its account
		}
		if o := c.g.byUID[ref.UID]; o != nil {
			if ownedBy(n, o) {
				return true, nil
			}
			continue
		}
		ns := ""
		if res.Namespaced {
			ns = n.meta.Namespace
		}
		key := res.Key(ns, ref.Name)
		kv, _, err := c.cfg.Store.Get(ctx, key, storage.ReadOptions{})
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
func ownedBy(d, o *node) bool {
	return !o.res.Namespaced || o.meta.Namespace == d.meta.Namespace
}

// objectRef returns the reference to n's object.
func objectRef(n *node) *apiv1.ResourceRef {
	return reconcile.Ref(n.res, n.meta.Namespace, n.meta.Name, "")
}

// delete deletes a dependent in the background, guarded by its uid so a
// new object of the same name is never collected by mistake.
func (c *collector) delete(ctx context.Context, n *node) error {
	uid := n.meta.UID
	_, err := c.cfg.Objects.DeleteObject(ctx, n.res, objectRef(n), &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// orphan removes the owner reference to owner from dependent d.
func (c *collector) orphan(ctx context.Context, d *node, owner types.UID) error {
	return c.update(ctx, d, func(acc metav1.Object) {
		acc.SetOwnerReferences(slices.DeleteFunc(acc.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.UID == owner }))
	})
}

// dropFinalizer removes finalizer f from an owner being deleted; without
// finalizers left, the update removes it.
func (c *collector) dropFinalizer(ctx context.Context, n *node, f string) error {
	return c.update(ctx, n, func(acc metav1.Object) {
		acc.SetFinalizers(slices.DeleteFunc(acc.GetFinalizers(), func(x string) bool { return x == f }))
	})
}

// update changes the current state of n's object with change, unless it
// is by now another object of the same name.
func (c *collector) update(ctx context.Context, n *node, change func(metav1.Object)) error {
	return reconcile.Update(ctx, c.cfg.Objects, n.res, objectRef(n), func(old runtime.Object) (runtime.Object, error) {
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
}

// customMeta reads what the collector needs of a stored custom resource
// (JSON): its metadata alone.
func customMeta(value []byte) (protolist.Meta, error) {
	var obj struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(value, &obj); err != nil {
		return protolist.Meta{}, fmt.Errorf("gc: %w", err)
	}
	md := obj.Metadata
	return protolist.Meta{
		Name: md.Name, Namespace: md.Namespace, UID: md.UID, Deleting: md.DeletionTimestamp != nil,
		Finalizers: md.Finalizers, OwnerReferences: md.OwnerReferences,
	}, nil
}
