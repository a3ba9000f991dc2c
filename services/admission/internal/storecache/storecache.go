// Package storecache is the admission service's view of the objects it
// reads from the store (policies, webhook configurations, namespaces,
// params): each resource read with one Range of its key prefix, then
// followed with one Watch from the revision after it; a watch that fails
// starts over with a new Range.
package storecache

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	storeclient "github.com/meridian-cp/meridian/services/store/client"
)

// Store is what the cache reads: *storeclient.Client implements it.
type Store interface {
	// KV serves Range.
	KV() storev1.KVServiceClient
	// Watch runs one logical watch across members (storeclient.Client.Watch).
	Watch(ctx context.Context, req *storev1.WatchCreateRequest, fn func(*storev1.WatchResponse) error) error
}

var _ Store = (*storeclient.Client)(nil)

// Decrypt turns a stored value into the encoded object (values encrypted
// at rest).
type Decrypt func(ctx context.Context, key string, value []byte) ([]byte, error)

// Cache holds the objects of the resources it follows, each read with one
// Range of its key prefix and then followed with one Watch from the
// revision after it (a watch that fails starts over with a new Range).
// A resource is followed from the first call of follow until the cache's
// context ends. onChange is called, on the follower's goroutine, after
// each batch of changes is visible.
type Cache struct {
	ctx      context.Context
	store    Store
	decrypt  Decrypt
	codec    *codec.Codec
	logger   *slog.Logger
	retry    time.Duration
	onChange func(res *registry.Resource)

	mu       sync.RWMutex
	objects  map[*registry.Resource]map[string]runtime.Object // resource → key → object
	synced   map[*registry.Resource]chan struct{}             // closed after the first Range
	followed map[*registry.Resource]bool
}

// New returns a Cache following the store until ctx ends; onChange (nil:
// none) is called after each batch of changes of a followed resource is
// visible, on its follower's goroutine.
func New(ctx context.Context, store Store, decrypt Decrypt, logger *slog.Logger, onChange func(*registry.Resource)) (*Cache, error) {
	c, err := codec.New()
	if err != nil {
		return nil, fmt.Errorf("storecache: %w", err)
	}
	if onChange == nil {
		onChange = func(*registry.Resource) {}
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &Cache{
		ctx: ctx, store: store, decrypt: decrypt, codec: c, logger: logger, retry: time.Second, onChange: onChange,
		objects: map[*registry.Resource]map[string]runtime.Object{}, synced: map[*registry.Resource]chan struct{}{},
		followed: map[*registry.Resource]bool{},
	}, nil
}

// Follow starts following res unless it is followed already, and returns
// a channel closed once its objects have been read.
func (c *Cache) Follow(res *registry.Resource) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.followed[res] {
		return c.synced[res]
	}
	c.followed[res] = true
	c.synced[res] = make(chan struct{})
	c.objects[res] = map[string]runtime.Object{}
	go c.run(res)
	return c.synced[res]
}

// Get returns the object of res named name in namespace ns, or nil.
func (c *Cache) Get(res *registry.Resource, ns, name string) runtime.Object {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.objects[res][res.Key(ns, name)]
}

// List returns the objects of res in namespace ns ("" for every
// namespace, or cluster-scoped) whose labels sel matches.
func (c *Cache) List(res *registry.Resource, ns string, sel labels.Selector) []runtime.Object {
	prefix := res.KeyPrefix(ns)
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []runtime.Object
	for k, o := range c.objects[res] {
		if len(k) < len(prefix) || k[:len(prefix)] != prefix {
			continue
		}
		if sel != nil {
			if m, ok := o.(interface{ GetLabels() map[string]string }); ok && !sel.Matches(labels.Set(m.GetLabels())) {
				continue
			}
		}
		out = append(out, o)
	}
	return out
}

func (c *Cache) run(res *registry.Resource) {
	for c.ctx.Err() == nil {
		err := c.read(res)
		if c.ctx.Err() != nil {
			return
		}
		c.logger.Warn("admission: reading the objects again", "resource", res.GVR.String(), "error", err, "retry", c.retry)
		select {
		case <-c.ctx.Done():
		case <-time.After(c.retry):
		}
	}
}

// read lists res's objects, then follows them until the watch fails.
func (c *Cache) read(res *registry.Resource) error {
	prefix := res.KeyPrefix("")
	resp, err := c.store.KV().Range(c.ctx, &storev1.RangeRequest{Key: []byte(prefix), RangeEnd: storeclient.PrefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("reading the objects: %w", err)
	}
	objs := map[string]runtime.Object{}
	for _, kv := range resp.GetKvs() {
		if o := c.decode(res, kv); o != nil {
			objs[string(kv.GetKey())] = o
		}
	}
	c.mu.Lock()
	c.objects[res] = objs
	synced := c.synced[res]
	c.mu.Unlock()
	c.onChange(res)
	select {
	case <-synced:
	default:
		close(synced)
	}
	req := &storev1.WatchCreateRequest{Key: []byte(prefix), RangeEnd: storeclient.PrefixEnd(prefix), StartRevision: resp.GetHeader().GetRevision() + 1}
	return c.store.Watch(c.ctx, req, func(w *storev1.WatchResponse) error {
		if len(w.GetEvents()) == 0 {
			return nil
		}
		c.mu.Lock()
		for _, ev := range w.GetEvents() {
			key := string(ev.GetKv().GetKey())
			if ev.GetType() == storev1.Event_TYPE_DELETE {
				delete(c.objects[res], key)
			} else if o := c.decode(res, ev.GetKv()); o != nil {
				c.objects[res][key] = o
			} else {
				delete(c.objects[res], key)
			}
		}
		c.mu.Unlock()
		c.onChange(res)
		return nil
	})
}

// decode returns the object of kv, or nil (logged) when it does not
// decrypt or decode.
func (c *Cache) decode(res *registry.Resource, kv *storev1.KeyValue) runtime.Object {
	key, value := string(kv.GetKey()), kv.GetValue()
	if c.decrypt != nil {
		var err error
		if value, err = c.decrypt(c.ctx, key, value); err != nil {
			c.logger.Error("admission: an object does not decrypt; left out", "key", key, "error", err)
			return nil
		}
	}
	obj := res.New()
	if err := c.codec.DecodeStorage(value, kv.GetModRevision(), obj); err != nil {
		c.logger.Error("admission: an object does not decode; left out", "key", key, "error", err)
		return nil
	}
	obj.GetObjectKind().SetGroupVersionKind(res.GVK())
	return obj
}
