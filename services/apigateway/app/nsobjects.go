package app

import (
	"context"
	"fmt"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/nsobject"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/rootcacert"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/serviceaccount"
	"github.com/meridian-cp/meridian/services/apigateway/internal/resources"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
)

// startNamespaceObjects runs, until bg ends, the controllers that keep an
// object in every namespace, as kube-controller-manager's: the "default"
// ServiceAccount, and the kube-root-ca.crt ConfigMap of RootCAFile (none
// when it is empty).
func (a *App) startNamespaceObjects(bg context.Context, reg *registry.Registry, c *codec.Codec, store *storage.Store, rs *resources.Server) error {
	cfg := nsobject.Config{Registry: reg, Codec: c, Store: store, Objects: rs, Logger: a.cfg.Logger, Retry: time.Second}
	sa, err := serviceaccount.New(cfg)
	if err != nil {
		return fmt.Errorf("apigateway: %w", err)
	}
	a.background(bg, sa.Run)
	if a.cfg.RootCAFile == "" {
		return nil
	}
	publisher, err := rootcacert.New(cfg, a.cfg.RootCAFile, 0)
	if err != nil {
		return fmt.Errorf("apigateway: %w", err)
	}
	a.background(bg, publisher.Run)
	return nil
}
