// Package quota enforces ResourceQuota object counts in the gateway, as
// kube-apiserver's ResourceQuota admission and kube-controller-manager's
// quota controller do between them (the arithmetic is lib/kube/quota):
//
//   - Charge, called by a create after admission and before the object
//     is stored, adds one to status.used of every quota of the namespace
//     that limits the resource, with a compare-and-swap on the quota's
//     mod revision in the store, retried on conflict. Creates from any
//     number of gateways serialize on that swap, so a quota is never
//     overshot; a create refused by the quota stores nothing, and one that
//     fails after its charge leaves used one too high until the next
//     recount.
//   - Run follows the namespace's quotas through one store watch (so a
//     create in a namespace without quotas reads nothing) and writes each
//     quota's status (hard from spec.hard, used counted in the store) when
//     it is new or its spec changed, after a delete of a counted resource
//     (Replenish), and every Resync.
//
// A recount that runs while a create is between its charge and its
// store write does not see that object, and writes a used one lower than
// the truth until the next recount: the same window kube-controller-
// manager's recount has.
package quota

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	kubequota "github.com/meridian-cp/meridian/lib/kube/quota"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storage"
	"github.com/meridian-cp/meridian/services/apigateway/internal/storewatch"
)

// DefaultResync is how often every quota is recounted when Config.Resync
// is 0: kube-controller-manager's --resource-quota-sync-period.
const DefaultResync = 5 * time.Minute

// maxChargeAttempts bounds the compare-and-swap retries of one charge:
// each lost race means another create won, so this many concurrent
// creates of one namespace can all be served.
const maxChargeAttempts = 100

// Store is what quotas read and write. *storage.Store implements it.
type Store interface {
	storewatch.Store
	// Get reads one key, linearizably with zero ReadOptions.
	Get(ctx context.Context, key string, opts storage.ReadOptions) (storage.KV, int64, error)
	// Update replaces a key whose mod revision is modRevision.
	Update(ctx context.Context, key string, value []byte, modRevision, lease int64) (int64, error)
	// Count returns the number of keys under prefix.
	Count(ctx context.Context, prefix string) (int64, error)
}

var _ Store = (*storage.Store)(nil)

// Objects writes quota status as the API does. *resources.Server
// implements it.
type Objects interface {
	// UpdateObject replaces the object ref names with mutate's result
	// from the stored one, retried over concurrent writes.
	UpdateObject(ctx context.Context, res *registry.Resource, ref *apiv1.ResourceRef, mutate func(old runtime.Object) (runtime.Object, error)) (runtime.Object, error)
}

// Config configures Quotas.
type Config struct {
	// Registry serves resourcequotas and the counted resources. Required.
	Registry *registry.Registry
	// Codec decodes and encodes stored quotas. Required.
	Codec *codec.Codec
	// Store holds them. Required.
	Store Store
	// Logger logs; nil means slog.Default().
	Logger *slog.Logger
	// Resync is how often every quota is recounted; 0 means
	// DefaultResync.
	Resync time.Duration
	// Retry is how long a failed watch or status write waits; 0 means 1
	// second.
	Retry time.Duration
}

// User is the identity the recounts write as.
var User = identity.User{
	Name:   "system:serviceaccount:kube-system:resourcequota-controller",
	Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
}

// Quotas charges creates against ResourceQuotas and keeps their status.
// Charge and Replenish are safe for concurrent use; Run runs once.
type Quotas struct {
	cfg    Config
	res    *registry.Resource
	byGR   map[schema.GroupResource]*registry.Resource
	replen chan string // namespaces to recount

	mu struct {
		sync.RWMutex
		// hard is every quota's spec.hard, by namespace and name.
		hard map[string]map[string]corev1.ResourceList
	}
}

// New returns Quotas, or an error naming every required field cfg lacks.
func New(cfg Config) (*Quotas, error) {
	var errs []error
	if cfg.Registry == nil {
		errs = append(errs, errors.New("quota: a Registry is required"))
	}
	if cfg.Codec == nil {
		errs = append(errs, errors.New("quota: a Codec is required"))
	}
	if cfg.Store == nil {
		errs = append(errs, errors.New("quota: a Store is required"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	res, ok := cfg.Registry.Lookup(corev1.SchemeGroupVersion.WithResource("resourcequotas"))
	if !ok {
		return nil, errors.New("quota: the registry serves no resourcequotas")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Resync == 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.Retry == 0 {
		cfg.Retry = time.Second
	}
	q := &Quotas{cfg: cfg, res: res, byGR: map[schema.GroupResource]*registry.Resource{}, replen: make(chan string, 64)}
	for _, gv := range cfg.Registry.GroupVersions() {
		for _, r := range cfg.Registry.Resources(gv) {
			if _, ok := q.byGR[r.GVR.GroupResource()]; !ok {
				q.byGR[r.GVR.GroupResource()] = r
			}
		}
	}
	q.mu.hard = map[string]map[string]corev1.ResourceList{}
	return q, nil
}

// limiting returns the names of the quotas of ns that limit any of names.
func (q *Quotas) limiting(ns string, names []corev1.ResourceName) []string {
	q.mu.RLock()
	defer q.mu.RUnlock()
	var out []string
	for name, hard := range q.mu.hard[ns] {
		for _, n := range names {
			if _, ok := hard[n]; ok {
				out = append(out, name)
				break
			}
		}
	}
	return out
}

// Charge counts one new object of gr named name (for messages) in
// namespace ns against every quota of ns that limits gr: each quota's
// status.used grows by one in the store, or the create is refused with
// 403 "exceeded quota". A dry run checks without writing. A quota whose
// status has not been computed yet is counted first.
func (q *Quotas) Charge(ctx context.Context, ns string, gr schema.GroupResource, name string, dryRun bool) error {
	if ns == "" {
		return nil
	}
	names := kubequota.Names(gr)
	for _, qname := range q.limiting(ns, names) {
		if err := q.charge(ctx, ns, qname, names, gr, name, dryRun); err != nil {
			return err
		}
	}
	return nil
}

// charge charges one quota, retrying its compare-and-swap.
func (q *Quotas) charge(ctx context.Context, ns, qname string, names []corev1.ResourceName, gr schema.GroupResource, name string, dryRun bool) error {
	key := q.res.Key(ns, qname)
	for attempt := 0; attempt < maxChargeAttempts; attempt++ {
		kv, _, err := q.cfg.Store.Get(ctx, key, storage.ReadOptions{})
		if errors.Is(err, storage.ErrNotFound) {
			return nil // deleted since the watch reported it
		}
		if err != nil {
			return apierrors.NewInternalError(fmt.Errorf("reading quota %s: %w", qname, err))
		}
		rq := &corev1.ResourceQuota{}
		if err := q.cfg.Codec.DecodeStorage(kv.Value, kv.ModRevision, rq); err != nil {
			return apierrors.NewInternalError(fmt.Errorf("decoding quota %s: %w", qname, err))
		}
		if !q.known(rq, names) {
			st, err := kubequota.Status(rq, q.counter(ctx, ns))
			if err != nil {
				return apierrors.NewInternalError(err)
			}
			rq.Status = st
		}
		changed, err := kubequota.Charge(rq, names, gr, name)
		if err != nil || !changed || dryRun {
			return err
		}
		data, err := q.cfg.Codec.EncodeStorage(rq)
		if err != nil {
			return apierrors.NewInternalError(err)
		}
		_, err = q.cfg.Store.Update(ctx, key, data, kv.ModRevision, 0)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, storage.ErrConflict):
			continue
		case errors.Is(err, storage.ErrNotFound):
			return nil
		default:
			return apierrors.NewInternalError(fmt.Errorf("charging quota %s: %w", qname, err))
		}
	}
	return apierrors.NewConflict(q.res.GVR.GroupResource(), qname, errors.New("too many concurrent charges of the quota; try again"))
}

// known reports whether rq's status.used holds every name its spec limits
// of names.
func (q *Quotas) known(rq *corev1.ResourceQuota, names []corev1.ResourceName) bool {
	for _, n := range names {
		if _, limited := rq.Spec.Hard[n]; !limited {
			continue
		}
		if _, ok := rq.Status.Used[n]; !ok {
			return false
		}
	}
	return true
}

// counter counts the objects of a resource in namespace ns.
func (q *Quotas) counter(ctx context.Context, ns string) func(schema.GroupResource) (int64, error) {
	return func(gr schema.GroupResource) (int64, error) {
		r, ok := q.byGR[gr]
		if !ok || !r.Namespaced {
			return 0, nil
		}
		return q.cfg.Store.Count(ctx, r.KeyPrefix(ns))
	}
}

// Replenish tells the recounts that an object of gr in ns was deleted:
// the quotas of ns that limit gr are recounted soon.
func (q *Quotas) Replenish(ns string, gr schema.GroupResource) {
	if ns == "" || len(q.limiting(ns, kubequota.Names(gr))) == 0 {
		return
	}
	select {
	case q.replen <- ns:
	default: // a full queue: the next resync recounts
	}
}

// Run follows the quotas, and recounts them writing through objs, until
// ctx ends.
func (q *Quotas) Run(ctx context.Context, objs Objects) {
	ctx, cancel := context.WithCancel(identity.WithUser(ctx, User))
	batches := make(chan storewatch.Batch)
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		storewatch.Send(ctx, storewatch.Config{
			Store: q.cfg.Store, Prefix: q.res.KeyPrefix(""), What: "ResourceQuotas",
			Logger: q.cfg.Logger, Retry: q.cfg.Retry,
		}, batches)
	}()
	defer func() { cancel(); <-followed }()
	quotas := map[string]*corev1.ResourceQuota{} // by store key
	dirty := map[string]bool{}                   // keys to recount
	resync := time.NewTicker(q.cfg.Resync)
	defer resync.Stop()
	for {
		var retry <-chan time.Time
		if len(dirty) > 0 {
			retry = time.After(q.cfg.Retry)
		}
		select {
		case <-ctx.Done():
			return
		case b := <-batches:
			if b.Listed {
				clear(quotas)
			}
			for _, ch := range b.Changes {
				q.apply(quotas, dirty, ch.Key, ch.Value, ch.Revision)
			}
			q.publish(quotas)
		case ns := <-q.replen:
			for key, rq := range quotas {
				if rq.Namespace == ns {
					dirty[key] = true
				}
			}
		case <-resync.C:
			for key := range quotas {
				dirty[key] = true
			}
		case <-retry:
		}
		for key := range dirty {
			rq, ok := quotas[key]
			if !ok {
				delete(dirty, key)
				continue
			}
			if err := q.recount(ctx, objs, rq); err != nil {
				q.cfg.Logger.Warn("resourcequota: status update failed; retrying", "namespace", rq.Namespace, "resourcequota", rq.Name, "error", err)
				continue
			}
			delete(dirty, key)
		}
	}
}

// apply records the quota stored under key (nil value: deleted), and
// marks it for a recount when its status does not reflect its spec.
func (q *Quotas) apply(quotas map[string]*corev1.ResourceQuota, dirty map[string]bool, key string, value []byte, rev int64) {
	if value == nil {
		delete(quotas, key)
		delete(dirty, key)
		return
	}
	rq := &corev1.ResourceQuota{}
	if err := q.cfg.Codec.DecodeStorage(value, rev, rq); err != nil {
		q.cfg.Logger.Error("resourcequota: a quota does not decode; it limits nothing", "key", key, "error", err)
		delete(quotas, key)
		return
	}
	quotas[key] = rq
	if !equality.Semantic.DeepEqual(rq.Spec.Hard, rq.Status.Hard) || !q.counted(rq) {
		dirty[key] = true
	}
}

// counted reports whether rq's status.used holds every object count its
// spec limits.
func (q *Quotas) counted(rq *corev1.ResourceQuota) bool {
	for n := range rq.Spec.Hard {
		if _, ok := kubequota.Counted(n); !ok {
			continue
		}
		if _, ok := rq.Status.Used[n]; !ok {
			return false
		}
	}
	return true
}

// publish makes quotas the ones Charge checks.
func (q *Quotas) publish(quotas map[string]*corev1.ResourceQuota) {
	hard := map[string]map[string]corev1.ResourceList{}
	for _, rq := range quotas {
		if hard[rq.Namespace] == nil {
			hard[rq.Namespace] = map[string]corev1.ResourceList{}
		}
		hard[rq.Namespace][rq.Name] = rq.Spec.Hard
	}
	q.mu.Lock()
	q.mu.hard = hard
	q.mu.Unlock()
}

// recount writes rq's status from the store's counts, through the status
// subresource; the count is taken after the quota is read, on every
// retry of the update.
func (q *Quotas) recount(ctx context.Context, objs Objects, rq *corev1.ResourceQuota) error {
	ref := &apiv1.ResourceRef{Group: q.res.GVR.Group, Version: q.res.GVR.Version, Resource: q.res.GVR.Resource, Namespace: rq.Namespace, Name: rq.Name, Subresource: "status"}
	_, err := objs.UpdateObject(ctx, q.res, ref, func(old runtime.Object) (runtime.Object, error) {
		cur := old.(*corev1.ResourceQuota)
		st, err := kubequota.Status(cur, q.counter(ctx, cur.Namespace))
		if err != nil {
			return nil, err
		}
		if equality.Semantic.DeepEqual(st, cur.Status) {
			return old, nil
		}
		updated := cur.DeepCopy()
		updated.Status = st
		return updated, nil
	})
	if apierrors.IsNotFound(err) || ctx.Err() != nil {
		return nil
	}
	return err
}
