// Package crdtable keeps the registry's custom resources current: it
// follows the stored CustomResourceDefinitions through one store watch
// (package storewatch) and, after every batch of changes, replaces the
// registry's custom resources with those of every established CRD
// (registry.CustomResources). Every gateway replica runs one, so a CRD
// the CRD controller establishes is served by each within the watch's
// latency, without a restart.
package crdtable

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storewatch"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// Config configures a Table.
type Config struct {
	// Registry receives the custom resources; it must serve
	// CustomResourceDefinitions. Required.
	Registry *registry.Registry
	// Codec decodes stored CRDs. Required.
	Codec *codec.Codec
	// Store holds them. Required.
	Store storewatch.Store
	// Logger logs; nil means slog.Default().
	Logger *slog.Logger
	// Retry is how long a failed watch waits before the CRDs are read
	// again; 0 means 1 second.
	Retry time.Duration
}

// Table follows the CRDs into a registry; Run runs it.
type Table struct {
	cfg    Config
	prefix string
	crds   *storewatch.Index[*apiextensionsv1.CustomResourceDefinition] // Run's goroutine only
	synced chan struct{}
	first  bool
}

// New returns a Table, or an error naming every required field cfg
// lacks.
func New(cfg Config) (*Table, error) {
	var errs []error
	if cfg.Registry == nil {
		errs = append(errs, errors.New("crdtable: a Registry is required"))
	}
	if cfg.Codec == nil {
		errs = append(errs, errors.New("crdtable: a Codec is required"))
	}
	if cfg.Store == nil {
		errs = append(errs, errors.New("crdtable: a Store is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	res, ok := cfg.Registry.Lookup(apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"))
	if !ok {
		return nil, errors.New("crdtable: the registry serves no CustomResourceDefinitions")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	t := &Table{cfg: cfg, prefix: res.KeyPrefix(""), synced: make(chan struct{})}
	t.crds = storewatch.NewIndex(t.prefix, func(value []byte, rev int64) (*apiextensionsv1.CustomResourceDefinition, error) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		return crd, cfg.Codec.DecodeStorage(value, rev, crd)
	}, cfg.Logger)
	return t, nil
}

// Synced is closed once the CRDs have been read the first time.
func (t *Table) Synced() <-chan struct{} { return t.synced }

// Run follows the CRDs until ctx ends.
func (t *Table) Run(ctx context.Context) {
	storewatch.Run(ctx, storewatch.Config{
		Store: t.cfg.Store, Prefix: t.prefix, Handler: t, What: "CustomResourceDefinitions",
		Logger: t.cfg.Logger, Retry: t.cfg.Retry,
	})
}

// Reset implements storewatch.Handler.
func (t *Table) Reset() { t.crds.Reset() }

// Apply implements storewatch.Handler.
func (t *Table) Apply(key string, value []byte, rev int64) { t.crds.Put(key, value, rev) }

// Publish implements storewatch.Handler: the registry's custom resources
// become those of the CRDs now held, by CRD name.
func (t *Table) Publish(int64, bool) {
	t.cfg.Registry.SetCustom(Resources(t.crds.Objects))
	if !t.first {
		t.first = true
		close(t.synced)
	}
}

// Resources returns the custom resources of crds, CRD by CRD in name
// order, each CRD's storage version first.
func Resources(crds map[string]*apiextensionsv1.CustomResourceDefinition) []*registry.Resource {
	names := make([]string, 0, len(crds))
	for name := range crds {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []*registry.Resource
	for _, name := range names {
		out = append(out, registry.CustomResources(crds[name])...)
	}
	return out
}
