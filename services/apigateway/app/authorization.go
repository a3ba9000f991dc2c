package app

import (
	"context"
	"fmt"
	"time"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authz"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authz/bootstrap"
	"github.com/meridian-cp/meridian/services/apigateway/internal/resources"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
)

// Authorization modes (Config.AuthorizationMode), as kube-apiserver's
// --authorization-mode names them.
const (
	// AuthorizationRBAC decides requests by the cluster's RBAC objects,
	// members of system:masters excepted: the default.
	AuthorizationRBAC = "RBAC"
	// AuthorizationAlwaysAllow allows every authenticated request (and
	// every impersonation): for clusters that need no authorization, and
	// for measuring what RBAC costs.
	AuthorizationAlwaysAllow = "AlwaysAllow"
)

// apiserverUser is who the gateway writes its bootstrap objects as: a
// member of system:masters, as kube-apiserver's loopback client.
var apiserverUser = identity.User{Name: "system:apiserver", Groups: []string{authz.MastersGroup, "system:authenticated"}}

// policySyncTimeout bounds the wait for the first read of the RBAC
// policy at start.
const policySyncTimeout = time.Minute

// newAuthorizer returns the authorizer of the configured mode, and the
// RBAC authorizer behind it (nil for AlwaysAllow), not yet following the
// store.
func (a *App) newAuthorizer(store *storage.Store, c *codec.Codec) (authz.Authorizer, *authz.RBAC, error) {
	if a.cfg.AuthorizationMode == AuthorizationAlwaysAllow {
		a.log.Warn("authorization is off: every authenticated request is allowed", "authorization-mode", AuthorizationAlwaysAllow)
		return authz.AlwaysAllow{}, nil, nil
	}
	rbac, err := authz.New(authz.Config{Store: store, Codec: c, Logger: a.cfg.Logger})
	if err != nil {
		return nil, nil, fmt.Errorf("apigateway: %w", err)
	}
	return rbac, rbac, nil
}

// startAuthorization reconciles the bootstrap RBAC policy (the default
// ClusterRoles and ClusterRoleBindings), then starts following the RBAC
// objects (until bg ends) and waits until they are read, so that the
// gateway serves no request before it can decide it.
func (a *App) startAuthorization(ctx, bg context.Context, reg *registry.Registry, rs *resources.Server, rbac *authz.RBAC) error {
	if err := a.reconcileBootstrap(ctx, reg, rs); err != nil {
		return err
	}
	if rbac == nil {
		return nil
	}
	a.background(bg, rbac.Run)
	wait, cancel := context.WithTimeout(ctx, policySyncTimeout)
	defer cancel()
	if err := rbac.WaitSynced(wait); err != nil {
		return fmt.Errorf("apigateway: reading the RBAC policy: %w", err)
	}
	return nil
}

// reconcileBootstrap reconciles the bootstrap RBAC policy, trying again
// every bootstrapRetry for up to policySyncTimeout: its writes pass
// through admission, and the services start in any order, so the
// admission service may not answer yet (kube-apiserver's bootstrap-roles
// hook retries likewise).
func (a *App) reconcileBootstrap(ctx context.Context, reg *registry.Registry, rs *resources.Server) error {
	deadline := time.Now().Add(policySyncTimeout)
	for {
		err := bootstrap.Reconcile(identity.WithUser(ctx, apiserverUser), reg, rs)
		if err == nil {
			return nil
		}
		if time.Now().Add(bootstrapRetry).After(deadline) {
			return fmt.Errorf("apigateway: %w", err)
		}
		a.log.Warn("bootstrap RBAC policy not reconciled; retrying", "error", err, "retry", bootstrapRetry)
		select {
		case <-ctx.Done():
			return fmt.Errorf("apigateway: %w", err)
		case <-time.After(bootstrapRetry):
		}
	}
}

// bootstrapRetry is how long reconcileBootstrap waits between tries.
const bootstrapRetry = time.Second
