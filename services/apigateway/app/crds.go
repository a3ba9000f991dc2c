package app

import (
	"context"
	"fmt"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/crd"
	"github.com/meridian-cp/meridian/services/apigateway/internal/crdtable"
	"github.com/meridian-cp/meridian/services/apigateway/internal/resources"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
)

// crdSyncTimeout bounds the wait for the first read of the CRDs at start.
const crdSyncTimeout = time.Minute

// startCRDTable follows the stored CRDs into reg (until bg ends) and waits
// until they are read, so that the gateway serves every established
// custom resource from its first request.
func (a *App) startCRDTable(ctx, bg context.Context, reg *registry.Registry, c *codec.Codec, store *storage.Store) error {
	table, err := crdtable.New(crdtable.Config{Registry: reg, Codec: c, Store: store, Logger: a.cfg.Logger})
	if err != nil {
		return fmt.Errorf("apigateway: %w", err)
	}
	a.background(bg, table.Run)
	wait, cancel := context.WithTimeout(ctx, crdSyncTimeout)
	defer cancel()
	select {
	case <-table.Synced():
		return nil
	case <-wait.Done():
		return fmt.Errorf("apigateway: reading the CustomResourceDefinitions: %w", wait.Err())
	}
}

// startCRDController runs the CRD controller (names, Established,
// storedVersions, deletion of a deleted CRD's objects) until bg ends.
func (a *App) startCRDController(bg context.Context, reg *registry.Registry, c *codec.Codec, store *storage.Store, rs *resources.Server) error {
	ctl, err := crd.New(crd.Config{Registry: reg, Codec: c, Store: store, Objects: rs, User: apiserverUser, Logger: a.cfg.Logger})
	if err != nil {
		return fmt.Errorf("apigateway: %w", err)
	}
	a.background(bg, ctl.Run)
	return nil
}
