// Package apfconfig is the gateway's controller of the API Priority and
// Fairness configuration objects, as each kube-apiserver runs it:
//
//   - maintenance: the mandatory FlowSchemas and PriorityLevelConfigurations
//     (exempt, catch-all) exist with their fixed spec, the suggested ones
//     exist and keep the suggested spec while the servers own them
//     (annotation apf.kubernetes.io/autoupdate-spec, see
//     apfbootstrap.ServersOwn), and objects that are neither but say the
//     servers own them are deleted; at start and every Interval;
//   - status: each FlowSchema's Dangling condition says whether the
//     priority level it names exists, kept as the objects change.
//
// It follows the objects through one store watch of the group's keys
// (package storewatch: list, watch, list again when the watch fails) and
// writes through the API's own create, update and delete
// (resources.Server), as the User of its Config (system:apiserver).
// Every gateway runs it; replicas compute the same objects, and an update
// that would store what is stored writes nothing. The flow-control
// service reads the objects itself (services/flowcontrol, "Configuration").
package apfconfig

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/apfbootstrap"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/reconcile"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storewatch"
)

// Objects writes as the API does, for the user in ctx; its errors are
// Kubernetes errors. *resources.Server implements it.
type Objects interface {
	reconcile.Creator
	reconcile.Updater
	reconcile.Deleter
}

// DefaultInterval is how often the objects are maintained, as
// kube-apiserver does (once a minute).
const DefaultInterval = time.Minute

// Config configures a Controller.
type Config struct {
	// Registry serves FlowSchemas and PriorityLevelConfigurations. Required.
	Registry *registry.Registry
	// Codec decodes stored objects. Required.
	Codec *codec.Codec
	// Store holds them. Required.
	Store storewatch.Store
	// Objects carries out the writes. Required.
	Objects Objects
	// User writes; it must be allowed to write every object of the group
	// (system:apiserver, in system:masters). Required.
	User identity.User
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Interval is how often the objects are maintained; 0 means
	// DefaultInterval.
	Interval time.Duration
	// Retry is how soon a failed write is tried again and a failed watch
	// replaced; 0 means 1 second.
	Retry time.Duration
	// Sink, when set, is given the stored objects after they are read and
	// after every change (the gateway's fallback limiter follows them).
	Sink func(schemas []*flowcontrolv1.FlowSchema, levels []*flowcontrolv1.PriorityLevelConfiguration) error
}

// Controller maintains the configuration objects; Run runs it.
type Controller struct {
	cfg     Config
	schemas *registry.Resource
	levels  *registry.Resource
	prefix  string // the group's keys: both resources'
	now     func() time.Time
}

// New returns a Controller, or an error naming every required field cfg
// lacks.
func New(cfg Config) (*Controller, error) {
	if err := reconcile.Require("apfconfig", reconcile.Registry(cfg.Registry), reconcile.Codec(cfg.Codec), reconcile.Store(cfg.Store), reconcile.Objects(cfg.Objects), reconcile.User(cfg.User)); err != nil {
		return nil, err
	}
	gv := flowcontrolv1.SchemeGroupVersion
	schemas, ok := cfg.Registry.Lookup(gv.WithResource("flowschemas"))
	levels, ok2 := cfg.Registry.Lookup(gv.WithResource("prioritylevelconfigurations"))
	if !ok || !ok2 {
		return nil, errors.New("apfconfig: the registry serves no FlowSchemas or PriorityLevelConfigurations")
	}
	cfg.Logger, cfg.Retry = reconcile.Defaults(cfg.Logger, cfg.Retry, time.Second)
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	prefix := registry.KeyRoot + gv.Group + "/"
	return &Controller{cfg: cfg, schemas: schemas, levels: levels, prefix: prefix, now: time.Now}, nil
}

// objects is the controller's view of the stored configuration.
type objects struct {
	schemas map[string]*flowcontrolv1.FlowSchema
	levels  map[string]*flowcontrolv1.PriorityLevelConfiguration
}

// Run maintains the objects until ctx ends: once it has read them, it
// maintains them and their status, then keeps the status as the store's
// watch reports changes and maintains them again every Interval, and
// every Retry while a write failed. A failed watch is replaced by a new
// read after Retry (storewatch.Send), which maintains them again; the
// objects last read are kept meanwhile.
func (c *Controller) Run(ctx context.Context) {
	ctx, cancel := context.WithCancel(identity.WithUser(ctx, c.cfg.User))
	batches := make(chan storewatch.Batch)
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		storewatch.Send(ctx, storewatch.Config{
			Store: c.cfg.Store, Prefix: c.prefix, What: "apf configuration",
			Logger: c.cfg.Logger, Retry: c.cfg.Retry,
		}, batches)
	}()
	defer func() { cancel(); <-followed }()
	view := objects{schemas: map[string]*flowcontrolv1.FlowSchema{}, levels: map[string]*flowcontrolv1.PriorityLevelConfiguration{}}
	tick := time.NewTicker(c.cfg.Interval)
	defer tick.Stop()
	// read: the objects were read at least once; nothing is maintained
	// before, so that no write is made from an empty view.
	read, maintained, pending := false, false, false
	for {
		var retry <-chan time.Time
		if pending {
			retry = time.After(c.cfg.Retry)
		}
		select {
		case <-ctx.Done():
			return
		case b := <-batches:
			if b.Listed {
				clear(view.schemas)
				clear(view.levels)
			}
			for _, ch := range b.Changes {
				c.apply(&view, ch.Key, ch.Value, ch.Revision)
			}
			c.publish(view)
			if b.Listed {
				read, maintained = true, c.maintainAll(ctx, view)
			}
		case <-tick.C:
			if !read {
				continue
			}
			maintained = c.maintainAll(ctx, view)
		case <-retry:
			maintained = maintained || c.maintainAll(ctx, view)
		}
		pending = !maintained || !c.statusAll(ctx, view)
	}
}

// publish hands the objects to the Sink, by name.
func (c *Controller) publish(view objects) {
	if c.cfg.Sink == nil {
		return
	}
	schemas := make([]*flowcontrolv1.FlowSchema, 0, len(view.schemas))
	for _, name := range slices.Sorted(maps.Keys(view.schemas)) {
		schemas = append(schemas, view.schemas[name])
	}
	levels := make([]*flowcontrolv1.PriorityLevelConfiguration, 0, len(view.levels))
	for _, name := range slices.Sorted(maps.Keys(view.levels)) {
		levels = append(levels, view.levels[name])
	}
	if err := c.cfg.Sink(schemas, levels); err != nil {
		c.cfg.Logger.Warn("apf configuration: the fallback limiter refused it", "error", err)
	}
}

// apply records the object stored under key (nil value: deleted).
func (c *Controller) apply(view *objects, key string, value []byte, rev int64) {
	switch {
	case strings.HasPrefix(key, c.schemas.KeyPrefix("")):
		name := strings.TrimPrefix(key, c.schemas.KeyPrefix(""))
		fs := &flowcontrolv1.FlowSchema{}
		if value == nil || !c.decode(key, value, rev, fs) {
			delete(view.schemas, name)
			return
		}
		view.schemas[name] = fs
	case strings.HasPrefix(key, c.levels.KeyPrefix("")):
		name := strings.TrimPrefix(key, c.levels.KeyPrefix(""))
		pl := &flowcontrolv1.PriorityLevelConfiguration{}
		if value == nil || !c.decode(key, value, rev, pl) {
			delete(view.levels, name)
			return
		}
		view.levels[name] = pl
	}
}

func (c *Controller) decode(key string, value []byte, rev int64, into runtime.Object) bool {
	if err := c.cfg.Codec.DecodeStorage(value, rev, into); err != nil {
		c.cfg.Logger.Error("apf configuration: an object does not decode", "key", key, "error", err)
		return false
	}
	return true
}

// maintainAll maintains every mandatory and suggested object, priority
// levels first, and deletes the orphans; it reports whether every write
// succeeded.
func (c *Controller) maintainAll(ctx context.Context, view objects) bool {
	var errs []error
	for _, want := range apfbootstrap.PriorityLevels() {
		errs = append(errs, maintain(ctx, c, c.levels, view.levels[want.Name], want, apfbootstrap.MaintainPriorityLevel))
	}
	for _, want := range apfbootstrap.FlowSchemas() {
		errs = append(errs, maintain(ctx, c, c.schemas, view.schemas[want.Name], want, apfbootstrap.MaintainFlowSchema))
	}
	boot := map[string]bool{}
	for _, pl := range apfbootstrap.PriorityLevels() {
		boot["pl/"+pl.Name] = true
	}
	for _, fs := range apfbootstrap.FlowSchemas() {
		boot["fs/"+fs.Name] = true
	}
	for name, pl := range view.levels {
		if !boot["pl/"+name] && apfbootstrap.Orphaned(&pl.ObjectMeta) {
			errs = append(errs, c.delete(ctx, c.levels, &pl.ObjectMeta))
		}
	}
	for name, fs := range view.schemas {
		if !boot["fs/"+name] && apfbootstrap.Orphaned(&fs.ObjectMeta) {
			errs = append(errs, c.delete(ctx, c.schemas, &fs.ObjectMeta))
		}
	}
	if err := errors.Join(errs...); err != nil {
		c.cfg.Logger.Warn("apf configuration: maintenance failed; retrying", "error", err)
		return false
	}
	return true
}

// maintain creates want when nothing is stored, or updates the stored
// object to what update makes of it.
func maintain[T interface {
	runtime.Object
	*flowcontrolv1.FlowSchema | *flowcontrolv1.PriorityLevelConfiguration
}](ctx context.Context, c *Controller, res *registry.Resource, stored, want T, update func(stored, want T) (T, bool)) error {
	name := want.DeepCopyObject().(metav1.Object).GetName()
	if stored == nil {
		_, err := c.cfg.Objects.CreateObject(ctx, res, want.DeepCopyObject())
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %s %s: %w", res.Kind, name, err)
		}
		return nil
	}
	if _, changed := update(stored, want); !changed {
		return nil
	}
	err := reconcile.Update(ctx, c.cfg.Objects, res, reconcile.Ref(res, "", name, ""), func(old runtime.Object) (runtime.Object, error) {
		if out, changed := update(old.(T), want); changed {
			return out, nil
		}
		return old, nil
	})
	if err != nil {
		return fmt.Errorf("updating %s %s: %w", res.Kind, name, err)
	}
	return nil
}

// delete deletes the object m describes, that very one (its uid).
func (c *Controller) delete(ctx context.Context, res *registry.Resource, m *metav1.ObjectMeta) error {
	uid := m.UID
	_, err := c.cfg.Objects.DeleteObject(ctx, res, reconcile.Ref(res, "", m.Name, ""), &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting %s %s: %w", res.Kind, m.Name, err)
	}
	return nil
}

// statusAll brings every FlowSchema's Dangling condition up to date; it
// reports whether every write succeeded.
func (c *Controller) statusAll(ctx context.Context, view objects) bool {
	ok := true
	for name, fs := range view.schemas {
		_, exists := view.levels[fs.Spec.PriorityLevelConfiguration.Name]
		if current(fs, exists) {
			continue
		}
		err := reconcile.Update(ctx, c.cfg.Objects, c.schemas, reconcile.Ref(c.schemas, "", name, "status"), func(old runtime.Object) (runtime.Object, error) {
			stored := old.(*flowcontrolv1.FlowSchema)
			if stored.Spec.PriorityLevelConfiguration.Name != fs.Spec.PriorityLevelConfiguration.Name || current(stored, exists) {
				return old, nil // changed meanwhile: the watch brings it back
			}
			out := stored.DeepCopy()
			setDangling(out, exists, c.now())
			return out, nil
		})
		if err != nil {
			c.cfg.Logger.Warn("apf configuration: writing a FlowSchema's status failed; retrying", "flowschema", name, "error", err)
			ok = false
		}
	}
	return ok
}

// dangling returns the Dangling condition of a FlowSchema whose priority
// level exists or not, with kube-apiserver's reasons and messages.
func dangling(fs *flowcontrolv1.FlowSchema, exists bool) flowcontrolv1.FlowSchemaCondition {
	pl := fs.Spec.PriorityLevelConfiguration.Name
	if exists {
		return flowcontrolv1.FlowSchemaCondition{
			Type: flowcontrolv1.FlowSchemaConditionDangling, Status: flowcontrolv1.ConditionFalse, Reason: "Found",
			Message: fmt.Sprintf("This FlowSchema references the PriorityLevelConfiguration object named %q and it exists", pl),
		}
	}
	return flowcontrolv1.FlowSchemaCondition{
		Type: flowcontrolv1.FlowSchemaConditionDangling, Status: flowcontrolv1.ConditionTrue, Reason: "NotFound",
		Message: fmt.Sprintf("This FlowSchema references the PriorityLevelConfiguration object named %q but there is no such object", pl),
	}
}

// current reports whether fs's Dangling condition is what it should be.
func current(fs *flowcontrolv1.FlowSchema, exists bool) bool {
	want := dangling(fs, exists)
	for _, cond := range fs.Status.Conditions {
		if cond.Type == want.Type {
			return cond.Status == want.Status && cond.Reason == want.Reason && cond.Message == want.Message
		}
	}
	return false
}

// setDangling sets fs's Dangling condition; its transition time moves
// only when its status changes.
func setDangling(fs *flowcontrolv1.FlowSchema, exists bool, now time.Time) {
	want := dangling(fs, exists)
	want.LastTransitionTime = metav1.NewTime(now)
	for i, cond := range fs.Status.Conditions {
		if cond.Type != want.Type {
			continue
		}
		if cond.Status == want.Status {
			want.LastTransitionTime = cond.LastTransitionTime
		}
		fs.Status.Conditions[i] = want
		return
	}
	fs.Status.Conditions = append(fs.Status.Conditions, want)
}
