// Package storewatch keeps an in-memory view of the objects under one
// store prefix current: it reads them (one paged list at one revision),
// then follows their changes with one store watch, and starts over with a
// new list when the watch fails (a compaction, a store restart). The
// gateway's RBAC policy and its ServiceAccount token index are kept this
// way, so that no request reads the store to decide who may do what.
package storewatch

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
)

// Store is what a follower reads of the store (package storage describes
// each call). *storage.Store implements it.
type Store interface {
	// List reads the keys under prefix.
	List(ctx context.Context, prefix string, opts storage.ListOptions) (storage.ListResult, error)
	// Watch follows the changes under prefix from startRevision.
	Watch(ctx context.Context, prefix string, startRevision int64, progress bool) (*storage.Watcher, error)
}

var _ Store = (*storage.Store)(nil)

// Handler receives what a follower reads. Its methods are called from the
// goroutine of Run only, one at a time.
type Handler interface {
	// Reset forgets every object applied: a new list begins.
	Reset()
	// Apply records the object stored under key at revision rev; value is
	// nil when it was deleted.
	Apply(key string, value []byte, rev int64)
	// Publish makes what was applied visible: the view is now the
	// prefix's objects at revision rev. listed is true after a list
	// (everything was applied again since Reset), false after a batch of
	// watch events.
	Publish(rev int64, listed bool)
}

// Config configures Run.
type Config struct {
	// Store holds the objects. Required.
	Store Store
	// Prefix is the key prefix followed. Required.
	Prefix string
	// Handler receives the objects. Required.
	Handler Handler
	// What names the view in logs, e.g. "RBAC policy".
	What string
	// Logger logs; nil means slog.Default().
	Logger *slog.Logger
	// Retry is how long a failed watch waits before the objects are read
	// again; 0 means 1 second.
	Retry time.Duration
}

// Validate reports every required field cfg lacks.
func (c *Config) Validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("storewatch: a Store is required"))
	}
	if c.Prefix == "" {
		errs = append(errs, errors.New("storewatch: a Prefix is required"))
	}
	if c.Handler == nil {
		errs = append(errs, errors.New("storewatch: a Handler is required"))
	}
	return errors.Join(errs...)
}

// Run keeps cfg.Handler current until ctx ends. A watch that fails is
// replaced by a new list after Retry; the handler keeps its last view
// meanwhile. Call it on its own goroutine with a valid Config.
func Run(ctx context.Context, cfg Config) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	retry := cfg.Retry
	if retry == 0 {
		retry = time.Second
	}
	for ctx.Err() == nil {
		err := follow(ctx, cfg)
		if ctx.Err() != nil {
			return
		}
		log.Warn("reading it again", "view", cfg.What, "error", err, "retry", retry)
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
}

// follow reads the objects and follows their changes until the watch
// fails.
func follow(ctx context.Context, cfg Config) error {
	list, err := cfg.Store.List(ctx, cfg.Prefix, storage.ListOptions{})
	if err != nil {
		return err
	}
	h := cfg.Handler
	h.Reset()
	for _, kv := range list.KVs {
		h.Apply(kv.Key, kv.Value, kv.ModRevision)
	}
	h.Publish(list.Revision, true)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := cfg.Store.Watch(ctx, cfg.Prefix, list.Revision+1, false)
	if err != nil {
		return err
	}
	defer w.Close()
	for {
		b, err := w.Recv()
		if err != nil {
			return err
		}
		if len(b.Events) == 0 {
			continue
		}
		for _, ev := range b.Events {
			value := ev.KV.Value
			if ev.Type == storage.Delete {
				value = nil
			}
			h.Apply(ev.KV.Key, value, ev.KV.ModRevision)
		}
		h.Publish(b.Revision, false)
	}
}
