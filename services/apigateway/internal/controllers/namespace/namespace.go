// Package namespace is the gateway's namespace lifecycle controller: it
// finishes the deletion of namespaces, as kube-controller-manager's
// namespace controller does. It reads the store through Store and deletes
// and finalizes through Objects, the API's own delete and update, so
// every action it takes is a write with the API's semantics.
package namespace

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/reconcile"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Store is what the controller reads of the store (package storage
// describes it). *storage.Store implements it.
type Store interface {
	// List reads the keys under prefix.
	List(ctx context.Context, prefix string, opts storage.ListOptions) (storage.ListResult, error)
}

var _ Store = (*storage.Store)(nil)

// Objects writes objects as the API does, for the user in ctx, and returns
// Kubernetes errors (apierrors). *resources.Server implements it.
// Its updates are of a namespace's finalize subresource.
type Objects interface {
	reconcile.Deleter
	reconcile.Updater
}

// Config configures a Controller.
type Config struct {
	// Registry is the set of served resources: what a namespace may hold.
	// It must serve namespaces. Required.
	Registry *registry.Registry
	// Codec decodes stored objects. Required.
	Codec *codec.Codec
	// Store is the store the controller reads. Required.
	Store Store
	// Objects carries out the controller's deletes and updates. Required.
	Objects Objects
	// Logger logs; nil means slog.Default().
	Logger *slog.Logger
	// Interval is how often the namespaces being deleted are looked at;
	// 0 means 1 second.
	Interval time.Duration
}

// Controller is the namespace lifecycle controller; Run runs it.
type Controller struct {
	cfg Config
	ns  *registry.Resource
}

var namespacesGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}

// New returns a Controller, or an error naming every required field cfg
// lacks.
func New(cfg Config) (*Controller, error) {
	errs := []error{reconcile.Require("namespace", reconcile.Registry(cfg.Registry), reconcile.Codec(cfg.Codec), reconcile.Store(cfg.Store), reconcile.Objects(cfg.Objects))}
	var nsRes *registry.Resource
	if cfg.Registry != nil {
		var ok bool
		if nsRes, ok = cfg.Registry.Lookup(namespacesGVR); !ok {
			errs = append(errs, errors.New("namespace: the Registry does not serve namespaces"))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	cfg.Logger, cfg.Interval = reconcile.Defaults(cfg.Logger, cfg.Interval, time.Second)
	return &Controller{cfg: cfg, ns: nsRes}, nil
}

// namespaceController is the identity the namespace lifecycle acts as.
var namespaceController = identity.User{Name: "system:serviceaccount:kube-system:namespace-controller", Groups: []string{"system:serviceaccounts", "system:authenticated"}}

// Run finishes the deletion of namespaces until ctx ends, checking every
// Interval: for each namespace being deleted (it has a deletionTimestamp
// and still the "kubernetes" spec finalizer) it deletes every namespaced
// object in it (objects with finalizers are marked and waited for), and
// once the namespace is empty removes the finalizer, which removes the
// namespace.
//
// Every step is a compare-and-swap on the store, so several gateway
// replicas may run it at once.
func (c *Controller) Run(ctx context.Context) {
	ctx = identity.WithUser(ctx, namespaceController)
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		if err := c.reconcile(ctx); err != nil && ctx.Err() == nil {
			c.cfg.Logger.Warn("namespace controller", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reconcile takes every namespace being deleted one step further.
func (c *Controller) reconcile(ctx context.Context) error {
	page, err := c.cfg.Store.List(ctx, c.ns.KeyPrefix(""), storage.ListOptions{ReadOptions: storage.ReadOptions{Serializable: true}})
	if err != nil {
		return err
	}
	var errs []error
	for _, kv := range page.KVs {
		var ns corev1.Namespace
		if err := c.cfg.Codec.DecodeStorage(kv.Value, kv.ModRevision, &ns); err != nil {
			errs = append(errs, err)
			continue
		}
		if ns.DeletionTimestamp == nil || !slices.Contains(ns.Spec.Finalizers, corev1.FinalizerKubernetes) {
			continue
		}
		if err := c.empty(ctx, ns.Name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// empty deletes what is in namespace ns and, once nothing is left, removes
// its "kubernetes" finalizer.
func (c *Controller) empty(ctx context.Context, ns string) error {
	remaining := 0
	for _, gv := range c.cfg.Registry.GroupVersions() {
		for _, res := range c.cfg.Registry.Resources(gv) {
			if !res.Namespaced {
				continue
			}
			page, err := c.cfg.Store.List(ctx, res.KeyPrefix(ns), storage.ListOptions{})
			if err != nil {
				return err
			}
			for _, kv := range page.KVs {
				remaining++
				obj := res.New()
				if err := c.cfg.Codec.DecodeStorage(kv.Value, kv.ModRevision, obj); err != nil {
					return err
				}
				acc, _ := meta.Accessor(obj)
				if acc.GetDeletionTimestamp() != nil {
					continue // waiting for its finalizers
				}
				if _, err := c.cfg.Objects.DeleteObject(ctx, res, reconcile.Ref(res, ns, acc.GetName(), ""), &metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					return err
				}
			}
		}
	}
	if remaining > 0 {
		return nil // next round: what had finalizers may be gone by then
	}
	return reconcile.Update(ctx, c.cfg.Objects, c.ns, reconcile.Ref(c.ns, "", ns, "finalize"), func(old runtime.Object) (runtime.Object, error) {
		n := old.DeepCopyObject().(*corev1.Namespace)
		n.Spec.Finalizers = slices.DeleteFunc(n.Spec.Finalizers, func(f corev1.FinalizerName) bool { return f == corev1.FinalizerKubernetes })
		return n, nil
	})
}
