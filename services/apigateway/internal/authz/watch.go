package authz

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/rbac"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storewatch"
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
	return &RBAC{RBAC: rbac.New(), cfg: cfg}, nil
}

// NewStatic returns an RBAC authorizer whose policy is objs (Roles,
// ClusterRoles, RoleBindings and ClusterRoleBindings; anything else is
// ignored) and never changes: for tools and tests. Run must not be called.
func NewStatic(objs ...runtime.Object) *RBAC {
	return &RBAC{RBAC: rbac.NewStatic(objs...)}
}

// Run keeps the policy current until ctx ends (package storewatch): it
// reads every RBAC object, then follows their changes with one store
// watch, publishing a new policy after each batch of changes. A watch that
// fails is replaced by a new list after Retry; decisions meanwhile use the
// last policy.
func (r *RBAC) Run(ctx context.Context) {
	storewatch.Run(ctx, storewatch.Config{
		Store: r.cfg.Store, Prefix: rbac.KeyPrefix, Handler: &policyFollower{r: r},
		What: "RBAC policy", Logger: r.cfg.Logger, Retry: r.cfg.Retry,
	})
}

// policyFollower builds the policy from what storewatch reads.
type policyFollower struct {
	r *RBAC
	o *rbac.Objects
}

func (f *policyFollower) Reset() { f.o = rbac.NewObjects() }

// Apply records the object stored under key (nil value: deleted). A value
// that does not decode is logged and counts as deleted: it grants nothing.
func (f *policyFollower) Apply(key string, value []byte, rev int64) {
	if err := f.o.Apply(key, value, rev, f.r.cfg.Codec.DecodeStorage); err != nil {
		f.r.cfg.Logger.Error("RBAC policy: an object does not decode; it grants nothing", "key", key, "error", err)
	}
}

func (f *policyFollower) Publish(rev int64, listed bool) { f.r.Publish(f.o, rev, listed) }
