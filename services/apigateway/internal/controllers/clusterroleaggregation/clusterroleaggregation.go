// Package clusterroleaggregation is the gateway's ClusterRole aggregation
// controller, as kube-controller-manager's: the rules of a ClusterRole
// with an aggregationRule are the rules of every other ClusterRole its
// label selectors match, kept current as those roles change. admin, edit
// and view are aggregated this way, so a chart's ClusterRole labelled
// rbac.authorization.k8s.io/aggregate-to-view=true adds to view.
//
// It reads ClusterRoles through one store watch (package storewatch:
// list, watch, list again when the watch fails) and writes through the
// API's own update (resources.Server.UpdateObject), as
// system:serviceaccount:kube-system:clusterrole-aggregation-controller,
// whom the bootstrap policy lets "escalate" ClusterRoles. Every gateway
// runs it; the replicas compute the same rules, and an update that would
// store what is stored writes nothing.
package clusterroleaggregation

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/reconcile"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storewatch"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// Objects writes ClusterRoles as the API does, for the user in ctx.
// *resources.Server implements it.
type Objects interface {
	reconcile.Updater
}

// Config configures a Controller.
type Config struct {
	// Registry serves ClusterRoles. Required.
	Registry *registry.Registry
	// Codec decodes stored ClusterRoles. Required.
	Codec *codec.Codec
	// Store holds them. Required.
	Store storewatch.Store
	// Objects carries out the updates. Required.
	Objects Objects
	// Logger logs; nil means slog.Default().
	Logger *slog.Logger
	// Retry is how often failed updates are tried again, and how long a
	// failed watch waits before the roles are read again; 0 means 1
	// second.
	Retry time.Duration
}

// Controller keeps aggregated ClusterRoles' rules; Run runs it.
type Controller struct {
	cfg Config
	res *registry.Resource
}

// User is the identity the controller writes as.
var User = reconcile.ServiceAccountUser("clusterrole-aggregation-controller")

// New returns a Controller, or an error naming every required field cfg
// lacks.
func New(cfg Config) (*Controller, error) {
	const name = "clusterroleaggregation"
	if err := reconcile.Require(name, reconcile.Registry(cfg.Registry), reconcile.Codec(cfg.Codec), reconcile.Store(cfg.Store), reconcile.Objects(cfg.Objects)); err != nil {
		return nil, err
	}
	res, err := reconcile.Lookup(name, cfg.Registry, rbacv1.SchemeGroupVersion.WithResource("clusterroles"), "ClusterRoles")
	if err != nil {
		return nil, err
	}
	cfg.Logger, cfg.Retry = reconcile.Defaults(cfg.Logger, cfg.Retry, time.Second)
	return &Controller{cfg: cfg, res: res}, nil
}

// Run aggregates until ctx ends: it reads every ClusterRole, brings the
// aggregated ones up to date, then does so again after every change the
// store's watch reports, and every Retry while an update failed. A
// failed watch is replaced by a new read after Retry (storewatch.Send);
// the roles last read are kept meanwhile.
func (c *Controller) Run(ctx context.Context) {
	reconcile.Run(ctx, reconcile.Loop{
		Store: c.cfg.Store, Codec: c.cfg.Codec, Resource: c.res, What: "ClusterRoles to aggregate",
		User: User, Logger: c.cfg.Logger, Retry: c.cfg.Retry,
	}, func() *rbacv1.ClusterRole { return &rbacv1.ClusterRole{} }, c.syncAll)
}

// syncAll updates every aggregated role whose rules are not its
// aggregate, and reports whether all of them are up to date.
func (c *Controller) syncAll(ctx context.Context, roles map[string]*rbacv1.ClusterRole) bool {
	ok := true
	for name, role := range roles {
		if role.AggregationRule == nil {
			continue
		}
		rules, err := Aggregate(role, roles)
		if err != nil {
			c.cfg.Logger.Warn("clusterrole aggregation: an aggregation rule does not parse", "clusterrole", name, "error", err)
			continue
		}
		if equality.Semantic.DeepEqual(rules, role.Rules) {
			continue
		}
		if err := c.update(ctx, name, rules); err != nil {
			c.cfg.Logger.Warn("clusterrole aggregation: update failed; retrying", "clusterrole", name, "error", err)
			ok = false
		}
	}
	return ok
}

// update sets the rules of the aggregated role name, unless it is no
// longer aggregated.
func (c *Controller) update(ctx context.Context, name string, rules []rbacv1.PolicyRule) error {
	return reconcile.Update(ctx, c.cfg.Objects, c.res, reconcile.Ref(c.res, "", name, ""), func(old runtime.Object) (runtime.Object, error) {
		role := old.(*rbacv1.ClusterRole)
		if role.AggregationRule == nil {
			return old, nil
		}
		updated := role.DeepCopy()
		updated.Rules = rules
		return updated, nil
	})
}

// Aggregate returns the rules of the ClusterRoles of roles that role's
// aggregation rule selects, as kube-controller-manager gathers them:
// selector by selector, the selected roles by name (role itself left
// out), each rule once.
func Aggregate(role *rbacv1.ClusterRole, roles map[string]*rbacv1.ClusterRole) ([]rbacv1.PolicyRule, error) {
	rules := []rbacv1.PolicyRule{}
	for i := range role.AggregationRule.ClusterRoleSelectors {
		sel, err := metav1.LabelSelectorAsSelector(&role.AggregationRule.ClusterRoleSelectors[i])
		if err != nil {
			return nil, err
		}
		var names []string
		for name, r := range roles {
			if name != role.Name && sel.Matches(labels.Set(r.Labels)) {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		for _, name := range names {
			for _, rule := range roles[name].Rules {
				if !slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(r, rule) }) {
					rules = append(rules, rule)
				}
			}
		}
	}
	return rules, nil
}
