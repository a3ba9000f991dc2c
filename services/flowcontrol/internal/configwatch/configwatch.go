// Package configwatch follows the FlowSchema and PriorityLevelConfiguration
// objects in the store and hands every version of them to the flow-control
// core: one Range of the group's keys, then one Watch from the revision
// after it, each batch of changes applied as it arrives (a change reaches
// the classifier a store round trip after it is committed). A watch that
// cannot continue (compacted past, or refused) starts over with a new
// Range.
package configwatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	storeclient "github.com/meridian-cp/meridian/services/store/client"
)

// Store is what the follower reads: *storeclient.Client implements it.
type Store interface {
	// KV serves Range.
	KV() storev1.KVServiceClient
	// Watch runs one logical watch across members (storeclient.Client.Watch).
	Watch(ctx context.Context, req *storev1.WatchCreateRequest, fn func(*storev1.WatchResponse) error) error
}

var _ Store = (*storeclient.Client)(nil)

// Sink receives each version of the objects: the flow-control core
// (apf.Controller.Configure).
type Sink func(schemas []*flowcontrolv1.FlowSchema, levels []*flowcontrolv1.PriorityLevelConfiguration) error

// Config configures a Follower.
type Config struct {
	// Store holds the objects. Required.
	Store Store
	// Sink receives them. Required.
	Sink Sink
	// Decrypt, when set, turns a stored value into the encoded object
	// (values encrypted at rest); nil reads values as they are.
	Decrypt func(ctx context.Context, key string, value []byte) ([]byte, error)
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Retry is how long a failed read waits before the next; 0 means 1s.
	Retry time.Duration
}

// Follower follows the objects; Run runs it.
type Follower struct {
	cfg     Config
	codec   *codec.Codec
	schemas *registry.Resource
	levels  *registry.Resource
	prefix  string

	synced     chan struct{}
	syncedOnce sync.Once
}

// New returns a Follower.
func New(cfg Config) (*Follower, error) {
	if cfg.Store == nil || cfg.Sink == nil {
		return nil, errors.New("configwatch: a Store and a Sink are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Retry == 0 {
		cfg.Retry = time.Second
	}
	c, err := codec.New()
	if err != nil {
		return nil, fmt.Errorf("configwatch: %w", err)
	}
	res := registry.FlowControl()
	return &Follower{
		cfg: cfg, codec: c, schemas: res[0], levels: res[1],
		prefix: registry.KeyRoot + flowcontrolv1.GroupName + "/", synced: make(chan struct{}),
	}, nil
}

// Synced is closed once the stored objects have been handed to the Sink.
func (f *Follower) Synced() <-chan struct{} { return f.synced }

// Run follows the objects until ctx ends.
func (f *Follower) Run(ctx context.Context) {
	for ctx.Err() == nil {
		err := f.run(ctx)
		if ctx.Err() != nil {
			return
		}
		f.cfg.Logger.Warn("flow-control configuration: reading the objects again", "error", err, "retry", f.cfg.Retry)
		select {
		case <-ctx.Done():
		case <-time.After(f.cfg.Retry):
		}
	}
}

// objects are the stored objects by key.
type objects map[string]runtime.Object

func (f *Follower) run(ctx context.Context) error {
	resp, err := f.cfg.Store.KV().Range(ctx, &storev1.RangeRequest{Key: []byte(f.prefix), RangeEnd: storeclient.PrefixEnd(f.prefix)})
	if err != nil {
		return fmt.Errorf("reading the objects: %w", err)
	}
	objs := objects{}
	for _, kv := range resp.GetKvs() {
		f.apply(ctx, objs, kv, false)
	}
	if err := f.publish(objs); err != nil {
		return err
	}
	f.syncedOnce.Do(func() { close(f.synced) })
	req := &storev1.WatchCreateRequest{Key: []byte(f.prefix), RangeEnd: storeclient.PrefixEnd(f.prefix), StartRevision: resp.GetHeader().GetRevision() + 1}
	return f.cfg.Store.Watch(ctx, req, func(w *storev1.WatchResponse) error {
		if len(w.GetEvents()) == 0 {
			return nil
		}
		for _, ev := range w.GetEvents() {
			f.apply(ctx, objs, ev.GetKv(), ev.GetType() == storev1.Event_TYPE_DELETE)
		}
		return f.publish(objs)
	})
}

// apply records the object of kv (deleted: forgotten). One that does not
// decode is left out and logged.
func (f *Follower) apply(ctx context.Context, objs objects, kv *storev1.KeyValue, deleted bool) {
	key := string(kv.GetKey())
	if deleted {
		delete(objs, key)
		return
	}
	var obj runtime.Object
	switch {
	case strings.HasPrefix(key, f.schemas.KeyPrefix("")):
		obj = &flowcontrolv1.FlowSchema{}
	case strings.HasPrefix(key, f.levels.KeyPrefix("")):
		obj = &flowcontrolv1.PriorityLevelConfiguration{}
	default:
		return
	}
	value := kv.GetValue()
	if f.cfg.Decrypt != nil {
		var err error
		if value, err = f.cfg.Decrypt(ctx, key, value); err != nil {
			f.cfg.Logger.Error("flow-control configuration: an object does not decrypt; left out", "key", key, "error", err)
			delete(objs, key)
			return
		}
	}
	if err := f.codec.DecodeStorage(value, kv.GetModRevision(), obj); err != nil {
		f.cfg.Logger.Error("flow-control configuration: an object does not decode; left out", "key", key, "error", err)
		delete(objs, key)
		return
	}
	objs[key] = obj
}

// publish hands the objects to the Sink, in key order.
func (f *Follower) publish(objs objects) error {
	keys := make([]string, 0, len(objs))
	for k := range objs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var schemas []*flowcontrolv1.FlowSchema
	var levels []*flowcontrolv1.PriorityLevelConfiguration
	for _, k := range keys {
		switch o := objs[k].(type) {
		case *flowcontrolv1.FlowSchema:
			schemas = append(schemas, o)
		case *flowcontrolv1.PriorityLevelConfiguration:
			levels = append(levels, o)
		}
	}
	if err := f.cfg.Sink(schemas, levels); err != nil {
		return fmt.Errorf("applying the configuration: %w", err)
	}
	f.cfg.Logger.Debug("flow-control configuration applied", "flowschemas", len(schemas), "prioritylevelconfigurations", len(levels))
	return nil
}
