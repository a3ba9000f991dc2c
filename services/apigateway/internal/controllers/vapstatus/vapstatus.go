// Package vapstatus is the gateway's ValidatingAdmissionPolicy status
// controller, as kube-controller-manager's
// validatingadmissionpolicy-status-controller: for each policy whose
// status.observedGeneration is not its generation, it type-checks the
// policy's validations against the schemas of the kinds its
// matchConstraints name (typeChecker, as k8s.io/apiserver's
// validating.TypeChecker: at most 10 kinds, none for wildcards; the
// schemas are openapi.SchemaResolver's) and writes
// status.typeChecking.expressionWarnings (fieldRef and warning) with
// observedGeneration = generation. The warnings never change what the
// policy does: an expression that refers to a field the kind lacks still
// compiles (object is dynamic at admission) and fails only when
// evaluated.
//
// It reads policies through one store watch (package storewatch) and
// writes the status subresource through the API's own update
// (resources.Server.UpdateObject), as
// system:serviceaccount:kube-system:validatingadmissionpolicy-status-controller,
// whom the bootstrap policy lets update that status. Every gateway runs
// it; the replicas compute the same status from the same generation, and
// an update that would store what is stored writes nothing.
package vapstatus

import (
	"context"
	"log/slog"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/reconcile"
	"github.com/meridian-cp/meridian/services/apigateway/internal/openapi"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storewatch"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Objects writes policies' status as the API does, for the user in ctx.
// *resources.Server implements it.
type Objects interface {
	reconcile.Updater
}

// Config configures a Controller.
type Config struct {
	// Registry serves ValidatingAdmissionPolicies, and the kinds whose
	// schemas the policies are checked against. Required.
	Registry *registry.Registry
	// Codec decodes stored policies. Required.
	Codec *codec.Codec
	// Store holds them. Required.
	Store storewatch.Store
	// Objects carries out the status updates. Required.
	Objects Objects
	// Logger logs; nil means slog.Default().
	Logger *slog.Logger
	// Retry is how often failed updates are tried again, and how long a
	// failed watch waits before the policies are read again; 0 means 1
	// second.
	Retry time.Duration
}

// Controller keeps policies' type-checking status; Run runs it.
type Controller struct {
	cfg     Config
	res     *registry.Resource
	checker *typeChecker
}

// User is the identity the controller writes as.
var User = reconcile.ServiceAccountUser("validatingadmissionpolicy-status-controller")

// New returns a Controller, or an error naming every required field cfg
// lacks.
func New(cfg Config) (*Controller, error) {
	const name = "vapstatus"
	if err := reconcile.Require(name, reconcile.Registry(cfg.Registry), reconcile.Codec(cfg.Codec), reconcile.Store(cfg.Store), reconcile.Objects(cfg.Objects)); err != nil {
		return nil, err
	}
	res, err := reconcile.Lookup(name, cfg.Registry, admissionregistrationv1.SchemeGroupVersion.WithResource("validatingadmissionpolicies"), "ValidatingAdmissionPolicies")
	if err != nil {
		return nil, err
	}
	cfg.Logger, cfg.Retry = reconcile.Defaults(cfg.Logger, cfg.Retry, time.Second)
	return &Controller{cfg: cfg, res: res, checker: &typeChecker{
		schemas:    openapi.NewSchemaResolver(cfg.Registry),
		restMapper: registry.NewRESTMapper(cfg.Registry),
		logger:     cfg.Logger,
	}}, nil
}

// Run keeps the status until ctx ends: it reads every policy, checks
// those whose observedGeneration lags, then does so again after every
// change the store's watch reports, and every Retry while an update
// failed. A failed watch is replaced by a new read after Retry.
func (c *Controller) Run(ctx context.Context) {
	reconcile.Run(ctx, reconcile.Loop{
		Store: c.cfg.Store, Codec: c.cfg.Codec, Resource: c.res, What: "ValidatingAdmissionPolicies to type-check",
		User: User, Logger: c.cfg.Logger, Retry: c.cfg.Retry,
	}, func() *admissionregistrationv1.ValidatingAdmissionPolicy {
		return &admissionregistrationv1.ValidatingAdmissionPolicy{}
	}, c.syncAll)
}

// syncAll writes the status of every policy whose observedGeneration is
// not its generation, and reports whether all of them are up to date.
func (c *Controller) syncAll(ctx context.Context, policies map[string]*admissionregistrationv1.ValidatingAdmissionPolicy) bool {
	ok := true
	for name, p := range policies {
		if p.Status.ObservedGeneration >= p.Generation {
			continue
		}
		if err := c.update(ctx, name); err != nil {
			c.cfg.Logger.Warn("validatingadmissionpolicy status: update failed; retrying", "policy", name, "error", err)
			ok = false
		}
	}
	return ok
}

// update type-checks the stored policy name and writes its status,
// unless the status is already that of its generation.
func (c *Controller) update(ctx context.Context, name string) error {
	return reconcile.Update(ctx, c.cfg.Objects, c.res, reconcile.Ref(c.res, "", name, "status"), func(old runtime.Object) (runtime.Object, error) {
		p := old.(*admissionregistrationv1.ValidatingAdmissionPolicy)
		if p.Status.ObservedGeneration >= p.Generation {
			return old, nil
		}
		updated := p.DeepCopy()
		updated.Status.ObservedGeneration = p.Generation
		updated.Status.TypeChecking = &admissionregistrationv1.TypeChecking{ExpressionWarnings: c.checker.Check(p)}
		return updated, nil
	})
}
