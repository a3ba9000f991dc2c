// Package storewatch keeps an in-memory view of the objects under one
// store prefix current: it reads them (one paged list at one revision),
// then follows their changes with one store watch, and starts over with a
// new list when the watch fails (a compaction, a store restart). The
// gateway's RBAC policy and its ServiceAccount token index are kept this
// way (Run), so that no request reads the store to decide who may do
// what. The controllers that act on what they follow (ClusterRole
// aggregation, the default ServiceAccount and kube-root-ca.crt ones)
// receive the same reads batch by batch on their own goroutine (Send),
// where they also retry failed writes.
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

// Batch is what a follower read between two Publishes.
type Batch struct {
	// Prefix is the prefix followed (Config.Prefix).
	Prefix string
	// Listed is true for a new list: Changes are every object under
	// Prefix, and the objects of earlier batches are forgotten.
	Listed bool
	// Revision is the revision Prefix's objects are at after Changes.
	Revision int64
	// Changes are the objects applied, in order.
	Changes []Change
}

// Change is one object a Batch applies.
type Change struct {
	// Key is the object's store key.
	Key string
	// Value is the object stored, nil when it was deleted.
	Value []byte
	// Revision is the object's modification revision.
	Revision int64
}

// Send runs a follower (Run) whose handler sends each published Batch on
// out, until ctx ends; cfg.Handler is not used. Call it on its own
// goroutine. The follower waits for
// out's receiver, so the receiver sees every batch, in order, and a watch
// is read no faster than the receiver acts on it.
func Send(ctx context.Context, cfg Config, out chan<- Batch) {
	cfg.Handler = &sender{ctx: ctx, prefix: cfg.Prefix, out: out}
	Run(ctx, cfg)
}

// sender is the Handler of Send.
type sender struct {
	ctx    context.Context
	prefix string
	out    chan<- Batch
	batch  Batch
}

func (s *sender) Reset() { s.batch = Batch{} }

func (s *sender) Apply(key string, value []byte, rev int64) {
	s.batch.Changes = append(s.batch.Changes, Change{Key: key, Value: value, Revision: rev})
}

func (s *sender) Publish(rev int64, listed bool) {
	b := s.batch
	b.Prefix, b.Revision, b.Listed = s.prefix, rev, listed
	s.batch = Batch{}
	select {
	case s.out <- b:
	case <-s.ctx.Done():
	}
}

// Reconcile runs a follower (Send) of cfg and acts on what it reads, on
// the caller's goroutine, until ctx ends: each Batch goes to apply, then
// sync runs; while sync reports work left (false), it runs again every
// retry. Controllers that keep objects in line with what they follow are
// this loop.
func Reconcile(ctx context.Context, cfg Config, retry time.Duration, apply func(Batch), sync func(context.Context) bool) {
	ctx, cancel := context.WithCancel(ctx)
	batches := make(chan Batch)
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		Send(ctx, cfg, batches)
	}()
	defer func() { cancel(); <-followed }()
	pending := false
	for {
		var again <-chan time.Time
		if pending {
			again = time.After(retry)
		}
		select {
		case <-ctx.Done():
			return
		case b := <-batches:
			apply(b)
		case <-again:
		}
		pending = !sync(ctx)
	}
}
