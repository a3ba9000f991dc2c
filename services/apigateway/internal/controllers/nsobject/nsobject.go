// Package nsobject keeps one object of one kind, of one name, in every
// namespace that is not being deleted: the machinery of the gateway's
// serviceaccount controller (the "default" ServiceAccount) and rootcacert
// controller (the "kube-root-ca.crt" ConfigMap), as kube-controller-
// manager's controllers of those names keep them.
//
// It follows namespaces and the kept objects through two store watches
// (package storewatch: each lists, watches, and lists again when its
// watch fails; no read per namespace). Once both were read, it creates a
// missing object through the API's own create
// (resources.Server.CreateObject) within a round trip of the namespace's
// creation or the object's deletion, and, when the Spec says how, brings
// an object that drifted back with the API's own update. Every gateway
// runs it; replicas that race get AlreadyExists or write what is stored,
// and neither changes anything.
package nsobject

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/reconcile"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storewatch"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Objects writes as the API does, for the user in ctx, and returns
// Kubernetes errors. *resources.Server implements it.
type Objects interface {
	reconcile.Creator
	reconcile.Updater
}

// Spec is the object kept in every namespace.
type Spec struct {
	// Resource is the object's resource, a namespaced one. Required.
	Resource schema.GroupVersionResource
	// Name is the object's name. Required.
	Name string
	// New returns the object to create in namespace ns. Required.
	New func(ns string) runtime.Object
	// Repair returns stored brought back to what it must be, and whether
	// that differs from stored (which it must not modify); nil: an
	// existing object is left as it is.
	Repair func(stored runtime.Object) (runtime.Object, bool)
}

// Config configures a Controller.
type Config struct {
	// Registry serves namespaces and Spec.Resource. Required.
	Registry *registry.Registry
	// Codec decodes stored objects. Required.
	Codec *codec.Codec
	// Store holds them. Required.
	Store storewatch.Store
	// Objects carries out the creates and updates. Required.
	Objects Objects
	// Spec is the object kept. Required.
	Spec Spec
	// User is whom the controller writes as.
	User identity.User
	// Logger logs; nil means slog.Default().
	Logger *slog.Logger
	// Retry is how often failed writes are tried again, and how long a
	// failed watch waits before its prefix is read again; 0 means 1
	// second.
	Retry time.Duration
}

// Controller keeps Spec's object in every active namespace; Run runs it.
type Controller struct {
	cfg      Config
	ns, res  *registry.Resource
	resyncCh chan struct{}
}

// New returns a Controller, or an error naming every required field cfg
// lacks.
func New(cfg Config) (*Controller, error) {
	const name = "nsobject"
	if err := reconcile.Require(name, reconcile.Registry(cfg.Registry), reconcile.Codec(cfg.Codec), reconcile.Store(cfg.Store), reconcile.Objects(cfg.Objects),
		reconcile.Need{Missing: cfg.Spec.Name == "" || cfg.Spec.New == nil, Error: "Spec.Name and Spec.New are required"}); err != nil {
		return nil, err
	}
	ns, err := reconcile.Lookup(name, cfg.Registry, schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "namespaces")
	if err != nil {
		return nil, err
	}
	res, ok := cfg.Registry.Lookup(cfg.Spec.Resource)
	if !ok || !res.Namespaced {
		return nil, fmt.Errorf("nsobject: the registry serves no namespaced %s", cfg.Spec.Resource)
	}
	cfg.Logger, cfg.Retry = reconcile.Defaults(cfg.Logger, cfg.Retry, time.Second)
	return &Controller{cfg: cfg, ns: ns, res: res, resyncCh: make(chan struct{}, 1)}, nil
}

// Resync makes the controller look at every namespace's object again
// (Repair may answer differently now: the CA bundle changed). It does
// not block.
func (c *Controller) Resync() {
	select {
	case c.resyncCh <- struct{}{}:
	default:
	}
}

// state is what the watches have shown: the active namespaces, and the
// kept object of each namespace that has one.
type state struct {
	active  map[string]bool
	objects map[string]runtime.Object
	// dirty are the namespaces to look at.
	dirty map[string]bool
}

// Run keeps the objects until ctx ends. It acts once both namespaces
// and objects were read, then after every change the watches report, on
// Resync, and every Retry while a write failed. A failed watch is
// replaced by a new read of its prefix after Retry (storewatch.Send);
// what was last read is kept meanwhile.
func (c *Controller) Run(ctx context.Context) {
	ctx, cancel := context.WithCancel(identity.WithUser(ctx, c.cfg.User))
	batches := make(chan storewatch.Batch)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for _, r := range []*registry.Resource{c.ns, c.res} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			storewatch.Send(ctx, storewatch.Config{
				Store: c.cfg.Store, Prefix: r.KeyPrefix(""), What: r.GVR.Resource + " for " + c.cfg.Spec.Name,
				Logger: c.cfg.Logger, Retry: c.cfg.Retry,
			}, batches)
		}()
	}
	st := &state{active: map[string]bool{}, objects: map[string]runtime.Object{}, dirty: map[string]bool{}}
	listed := map[string]bool{}
	for {
		ready := len(listed) == 2
		if ready {
			c.sync(ctx, st)
		}
		var retry <-chan time.Time
		if ready && len(st.dirty) > 0 {
			retry = time.After(c.cfg.Retry)
		}
		select {
		case <-ctx.Done():
			return
		case b := <-batches:
			isNS := b.Prefix == c.ns.KeyPrefix("")
			if b.Listed {
				listed[b.Prefix] = true
				if isNS {
					clear(st.active)
					clear(st.dirty)
				} else {
					clear(st.objects)
				}
			}
			for _, ch := range b.Changes {
				c.apply(st, isNS, ch.Key, ch.Value, ch.Revision)
			}
			if b.Listed {
				// An object deleted while its watch was down is in
				// no change: look at every namespace.
				st.markAll()
			}
		case <-c.resyncCh:
			st.markAll()
		case <-retry:
		}
	}
}

// markAll marks every active namespace dirty.
func (st *state) markAll() {
	for ns := range st.active {
		st.dirty[ns] = true
	}
}

// apply records a namespace (isNS) or an object of the kept resource
// stored under key (nil value: deleted), and marks its namespace dirty.
func (c *Controller) apply(st *state, isNS bool, key string, value []byte, rev int64) {
	if isNS {
		name := strings.TrimPrefix(key, c.ns.KeyPrefix(""))
		ns := &corev1.Namespace{}
		if value != nil {
			if err := c.cfg.Codec.DecodeStorage(value, rev, ns); err != nil {
				c.cfg.Logger.Error("nsobject: a namespace does not decode", "key", key, "error", err)
				value = nil
			}
		}
		if value == nil || ns.DeletionTimestamp != nil || ns.Status.Phase == corev1.NamespaceTerminating {
			delete(st.active, name)
			delete(st.dirty, name)
			return
		}
		st.active[name] = true
		st.dirty[name] = true
		return
	}
	ns, name, ok := strings.Cut(strings.TrimPrefix(key, c.res.KeyPrefix("")), "/")
	if !ok || name != c.cfg.Spec.Name {
		return
	}
	if st.active[ns] {
		st.dirty[ns] = true
	}
	if value == nil {
		delete(st.objects, ns)
		return
	}
	obj := c.res.New()
	if err := c.cfg.Codec.DecodeStorage(value, rev, obj); err != nil {
		c.cfg.Logger.Error("nsobject: an object does not decode", "key", key, "error", err)
		delete(st.objects, ns)
		return
	}
	st.objects[ns] = obj
}

// sync brings the object of every dirty namespace to what it must be;
// namespaces whose write failed stay dirty.
func (c *Controller) sync(ctx context.Context, st *state) {
	for ns := range st.dirty {
		if err := c.syncOne(ctx, ns, st.objects[ns]); err != nil {
			c.cfg.Logger.Warn("nsobject: write failed; retrying", "namespace", ns, "object", c.cfg.Spec.Name, "error", err)
			continue
		}
		delete(st.dirty, ns)
	}
}

// syncOne creates the object of namespace ns when stored is nil, or
// repairs stored.
func (c *Controller) syncOne(ctx context.Context, ns string, stored runtime.Object) error {
	if stored == nil {
		_, err := c.cfg.Objects.CreateObject(ctx, c.res, c.cfg.Spec.New(ns))
		if apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err) || isTerminating(err) {
			// Another replica created it (the watch brings it), or the
			// namespace is gone or going (the watch brings that too).
			return nil
		}
		return err
	}
	if c.cfg.Spec.Repair == nil {
		return nil
	}
	if _, changed := c.cfg.Spec.Repair(stored); !changed {
		return nil
	}
	// Deleted meanwhile (reconcile.Update returns nil): the watch brings
	// the delete, and a create.
	return reconcile.Update(ctx, c.cfg.Objects, c.res, reconcile.Ref(c.res, ns, c.cfg.Spec.Name, ""), func(old runtime.Object) (runtime.Object, error) {
		repaired, _ := c.cfg.Spec.Repair(old)
		return repaired, nil
	})
}

// isTerminating reports a create refused because its namespace is being
// deleted.
func isTerminating(err error) bool {
	return apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause)
}
