package authz

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storewatch"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Store is what RBAC reads of the store. *storage.Store implements it.
type Store = storewatch.Store

// Config configures a store-fed RBAC authorizer.
type Config struct {
	// Store holds the RBAC objects. Required.
	Store Store
	// Codec decodes them. Required.
	Codec *codec.Codec
	// Logger logs; nil means slog.Default().
	Logger *slog.Logger
	// Retry is how long a failed watch waits before the policy is read
	// again; 0 means 1 second.
	Retry time.Duration
}

// Validate reports every required field cfg lacks.
func (c *Config) Validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("authz: a Store is required"))
	}
	if c.Codec == nil {
		errs = append(errs, errors.New("authz: a Codec is required"))
	}
	return errors.Join(errs...)
}

// rbacPrefix holds every RBAC object: one watch follows the four kinds.
var rbacPrefix = registry.KeyRoot + rbacv1.GroupName + "/"

// New returns an RBAC authorizer whose policy Run reads from cfg.Store.
// Until Run has read it, decisions wait for it (see WaitSynced).
func New(cfg Config) (*RBAC, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Retry == 0 {
		cfg.Retry = time.Second
	}
	return &RBAC{cfg: cfg, synced: make(chan struct{})}, nil
}

// NewStatic returns an RBAC authorizer whose policy is objs (Roles,
// ClusterRoles, RoleBindings and ClusterRoleBindings; anything else is
// ignored) and never changes: for tools and tests. Run must not be called.
func NewStatic(objs ...runtime.Object) *RBAC {
	r := &RBAC{synced: make(chan struct{})}
	o := newObjects()
	for _, obj := range objs {
		o.put(obj)
	}
	r.publish(o.publish(emptyPolicy(), 0))
	return r
}

// Run keeps the policy current until ctx ends (package storewatch): it
// reads every RBAC object, then follows their changes with one store
// watch, publishing a new policy after each batch of changes. A watch that
// fails is replaced by a new list after Retry; decisions meanwhile use the
// last policy.
func (r *RBAC) Run(ctx context.Context) {
	storewatch.Run(ctx, storewatch.Config{
		Store: r.cfg.Store, Prefix: rbacPrefix, Handler: &policyFollower{r: r},
		What: "RBAC policy", Logger: r.cfg.Logger, Retry: r.cfg.Retry,
	})
}

// policyFollower builds the policy from what storewatch reads.
type policyFollower struct {
	r *RBAC
	o *objects
}

func (f *policyFollower) Reset() { f.o = newObjects() }

func (f *policyFollower) Apply(key string, value []byte, rev int64) { f.r.apply(f.o, key, value, rev) }

func (f *policyFollower) Publish(rev int64, listed bool) {
	base := f.r.policy.Load()
	if listed || base == nil {
		base = emptyPolicy()
	}
	f.r.publish(f.o.publish(base, rev))
}

// apply records the object stored under key (nil value: deleted). A value
// that does not decode is logged and counts as deleted: it grants nothing.
func (r *RBAC) apply(o *objects, key string, value []byte, rev int64) {
	rest := strings.TrimPrefix(key, rbacPrefix)
	kind, rest, _ := strings.Cut(rest, "/")
	var obj runtime.Object
	switch kind {
	case "roles":
		obj = &rbacv1.Role{}
	case "clusterroles":
		obj = &rbacv1.ClusterRole{}
	case "rolebindings":
		obj = &rbacv1.RoleBinding{}
	case "clusterrolebindings":
		obj = &rbacv1.ClusterRoleBinding{}
	default:
		return
	}
	namespace, name := "", rest
	if kind == "roles" || kind == "rolebindings" {
		namespace, name, _ = strings.Cut(rest, "/")
	}
	if value != nil {
		if err := r.cfg.Codec.DecodeStorage(value, rev, obj); err != nil {
			r.cfg.Logger.Error("RBAC policy: an object does not decode; it grants nothing", "key", key, "error", err)
			value = nil
		}
	}
	if value == nil {
		o.remove(kind, namespace, name)
		return
	}
	o.put(obj)
}

// put records a decoded RBAC object; other objects are ignored.
func (o *objects) put(obj runtime.Object) {
	switch v := obj.(type) {
	case *rbacv1.ClusterRole:
		o.putClusterRole(v.Name, v.Rules, true)
	case *rbacv1.Role:
		o.putRole(v.Namespace, v.Name, v.Rules, true)
	case *rbacv1.ClusterRoleBinding:
		o.putClusterRoleBinding(v.Name, &binding{name: v.Name, roleRef: v.RoleRef, subjects: v.Subjects})
	case *rbacv1.RoleBinding:
		o.putRoleBinding(v.Namespace, v.Name, &binding{namespace: v.Namespace, name: v.Name, roleRef: v.RoleRef, subjects: v.Subjects})
	}
}

// remove records the deletion of the object of kind (a resource name)
// namespace/name.
func (o *objects) remove(kind, namespace, name string) {
	switch kind {
	case "clusterroles":
		o.putClusterRole(name, nil, false)
	case "roles":
		o.putRole(namespace, name, nil, false)
	case "clusterrolebindings":
		o.putClusterRoleBinding(name, nil)
	case "rolebindings":
		o.putRoleBinding(namespace, name, nil)
	}
}
