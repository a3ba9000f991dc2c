// Package leaderelect elects one leader among the flow-control replicas
// through a coordination.k8s.io/v1 Lease kept in the store, with the
// semantics of client-go's leaderelection: the holder renews the Lease's
// renewTime every RetryPeriod; another replica takes it once it has seen
// the same record unchanged for leaseDurationSeconds (measured on its own
// clock, so clocks need not agree) or once holderIdentity is empty; a
// take-over increments leaseTransitions and sets acquireTime. Every write
// is a store transaction guarded by the Lease key's mod revision (its
// resourceVersion), so two replicas can never both succeed from the same
// record. A leader that cannot renew for RenewDeadline stops leading
// before anyone else may take the Lease (RenewDeadline < LeaseDuration).
package leaderelect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

// Defaults of Config: a killed leader is replaced within LeaseDuration +
// RetryPeriod of its last renewal; a leader that stops gracefully hands
// over within RetryPeriod.
const (
	DefaultLeaseDuration = 4 * time.Second
	DefaultRenewDeadline = 3 * time.Second
	DefaultRetryPeriod   = 500 * time.Millisecond
	// DefaultNamespace and DefaultName place the Lease:
	// kubectl -n kube-system get lease meridian-flowcontrol.
	DefaultNamespace = "kube-system"
	DefaultName      = "meridian-flowcontrol"
)

// Config configures an Elector. Zero values mean the defaults.
type Config struct {
	// KV is the store's KV service (Range and Txn). Required.
	KV storev1.KVServiceClient
	// Identity is this replica's holderIdentity: the address gateways
	// reach it at, so that a follower can name the leader. Required.
	Identity string
	// Namespace and Name of the Lease; defaults DefaultNamespace and
	// DefaultName.
	Namespace, Name string
	// LeaseDuration, RenewDeadline and RetryPeriod as client-go's
	// LeaderElectionConfig; RenewDeadline must be shorter than
	// LeaseDuration, RetryPeriod shorter than RenewDeadline.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Encrypt and Decrypt, when set, turn the stored value into what is
	// kept at rest and back (the gateways' EncryptionConfiguration for
	// leases); nil keeps it as encoded.
	Encrypt func(ctx context.Context, key string, plain []byte) ([]byte, error)
	Decrypt func(ctx context.Context, key string, stored []byte) ([]byte, error)
	// OnStartedLeading is called when this replica becomes the leader,
	// with a context that ends when it stops leading; OnStoppedLeading
	// when it stops (after that context ended). Both run on Run's
	// goroutine and must return promptly.
	OnStartedLeading func(ctx context.Context)
	OnStoppedLeading func()
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil means time.Now (tests set it).
	Now func() time.Time
}

func (c *Config) defaults() {
	if c.Namespace == "" {
		c.Namespace = DefaultNamespace
	}
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.LeaseDuration == 0 {
		c.LeaseDuration = DefaultLeaseDuration
	}
	if c.RenewDeadline == 0 {
		c.RenewDeadline = DefaultRenewDeadline
	}
	if c.RetryPeriod == 0 {
		c.RetryPeriod = DefaultRetryPeriod
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.OnStartedLeading == nil {
		c.OnStartedLeading = func(context.Context) {}
	}
	if c.OnStoppedLeading == nil {
		c.OnStoppedLeading = func() {}
	}
}

// Validate reports every problem of c (after defaults) at once; the KV
// client is New's to check (a configuration is validated before the
// store is dialled).
func (c Config) Validate() error {
	c.defaults()
	var errs []error
	if c.Identity == "" {
		errs = append(errs, errors.New("an identity is required"))
	}
	if c.LeaseDuration <= c.RenewDeadline {
		errs = append(errs, fmt.Errorf("lease duration %s must exceed the renew deadline %s", c.LeaseDuration, c.RenewDeadline))
	}
	if c.RenewDeadline <= c.RetryPeriod {
		errs = append(errs, fmt.Errorf("renew deadline %s must exceed the retry period %s", c.RenewDeadline, c.RetryPeriod))
	}
	if c.RetryPeriod <= 0 {
		errs = append(errs, fmt.Errorf("retry period must be positive, got %s", c.RetryPeriod))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("leaderelect: invalid config: %w", err)
	}
	return nil
}

// Elector takes part in the election; Run runs it.
type Elector struct {
	cfg   Config
	key   string
	codec *codec.Codec

	// observed* are only used on Run's goroutine: the last record read,
	// its mod revision, and when (on this replica's clock) it last
	// changed.
	observed     *coordinationv1.Lease
	observedRev  int64
	observedTime time.Time

	mu struct {
		sync.Mutex
		leader  string // holder of an unexpired Lease; "" when none
		leading bool
	}
}

// New returns an Elector.
func New(cfg Config) (*Elector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.KV == nil {
		return nil, errors.New("leaderelect: a store KV client is required")
	}
	cfg.defaults()
	c, err := codec.New()
	if err != nil {
		return nil, fmt.Errorf("leaderelect: %w", err)
	}
	return &Elector{cfg: cfg, key: registry.Leases().Key(cfg.Namespace, cfg.Name), codec: c}, nil
}

// Key is the store key of the Lease.
func (e *Elector) Key() string { return e.key }

// Leader returns the holder of the Lease as last observed (this replica's
// identity while it leads) and whether this replica leads; "" while the
// Lease is free, expired or not yet read.
func (e *Elector) Leader() (holder string, leading bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mu.leader, e.mu.leading
}

// Run takes part until ctx ends: it tries to take the Lease every
// RetryPeriod, leads while it renews it, and on losing it goes back to
// trying. When ctx ends while leading it gives the Lease up (an empty
// holderIdentity, as client-go's ReleaseOnCancel) so that another replica
// takes over at once.
func (e *Elector) Run(ctx context.Context) {
	for ctx.Err() == nil {
		if !e.waitToLead(ctx) {
			return
		}
		e.lead(ctx)
	}
}

// waitToLead tries to take the Lease every RetryPeriod (jittered) until it
// has it (true) or ctx ends (false).
func (e *Elector) waitToLead(ctx context.Context) bool {
	for {
		ok, err := e.tryAcquireOrRenew(ctx)
		if err != nil && ctx.Err() == nil && !errors.Is(err, errConflict) {
			e.cfg.Logger.Warn("leader election: the lease could not be read or written", "lease", e.key, "error", err)
		}
		if ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(jitter(e.cfg.RetryPeriod)):
		}
	}
}

// lead runs the leader's term: it renews every RetryPeriod and ends the
// term once no renewal succeeded for RenewDeadline, or ctx ended (then it
// releases the Lease).
func (e *Elector) lead(ctx context.Context) {
	term, end := context.WithCancel(ctx)
	e.setLeading(true)
	e.cfg.Logger.Info("leader election: leading", "lease", e.key, "identity", e.cfg.Identity)
	e.cfg.OnStartedLeading(term)
	defer func() {
		end()
		e.setLeading(false)
		e.cfg.OnStoppedLeading()
	}()
	renewed := e.cfg.Now()
	tick := time.NewTicker(e.cfg.RetryPeriod)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			e.release()
			return
		case <-tick.C:
		}
		// A renewal may take at most what is left of the deadline.
		rctx, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline-e.cfg.Now().Sub(renewed))
		ok, err := e.tryAcquireOrRenew(rctx)
		cancel()
		if ok {
			renewed = e.cfg.Now()
			continue
		}
		if ctx.Err() != nil {
			e.release()
			return
		}
		if err == nil || e.cfg.Now().Sub(renewed) >= e.cfg.RenewDeadline {
			// Another replica holds the Lease, or it could not be
			// renewed in time: another may take it from now on.
			e.cfg.Logger.Warn("leader election: lost the lease", "lease", e.key, "identity", e.cfg.Identity, "error", err)
			return
		}
	}
}

func (e *Elector) setLeading(leading bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.mu.leading = leading
	if leading {
		e.mu.leader = e.cfg.Identity
	} else if e.mu.leader == e.cfg.Identity {
		e.mu.leader = ""
	}
}

func (e *Elector) setLeader(holder string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.mu.leader = holder
}

// errConflict reports a write that lost its compare-and-swap.
var errConflict = errors.New("the lease changed since it was read")

// tryAcquireOrRenew reads the Lease and, when it is free, expired or ours,
// writes it with this replica as holder, guarded by the mod revision it
// read. It reports whether this replica holds the Lease now; a nil error
// with false means another replica holds it.
func (e *Elector) tryAcquireOrRenew(ctx context.Context) (bool, error) {
	now := e.cfg.Now()
	stored, rev, err := e.get(ctx)
	if err != nil {
		return false, err
	}
	if stored == nil || rev != e.observedRev {
		e.observed, e.observedRev, e.observedTime = stored, rev, now
	}
	var cur *coordinationv1.LeaseSpec
	if stored != nil {
		cur = &stored.Spec
	}
	held := cur != nil && cur.HolderIdentity != nil && *cur.HolderIdentity != ""
	mine := held && *cur.HolderIdentity == e.cfg.Identity
	if held && !mine {
		d := time.Duration(ptrOr(cur.LeaseDurationSeconds, 0)) * time.Second
		if e.observedTime.Add(d).After(now) {
			e.setLeader(*cur.HolderIdentity)
			return false, nil
		}
	}
	if !mine {
		e.setLeader("")
	}
	spec := coordinationv1.LeaseSpec{
		HolderIdentity:       &e.cfg.Identity,
		LeaseDurationSeconds: ptr(int32((e.cfg.LeaseDuration + time.Second - 1) / time.Second)),
		RenewTime:            &metav1.MicroTime{Time: now},
		AcquireTime:          &metav1.MicroTime{Time: now},
		LeaseTransitions:     ptr(int32(0)),
	}
	if cur != nil {
		spec.LeaseTransitions = ptr(ptrOr(cur.LeaseTransitions, 0))
		if mine {
			spec.AcquireTime = cur.AcquireTime
		} else {
			*spec.LeaseTransitions++
		}
	}
	lease, newRev, err := e.put(ctx, stored, spec, rev)
	if err != nil {
		return false, err
	}
	e.observed, e.observedRev, e.observedTime = lease, newRev, now
	return true, nil
}

// release gives the Lease up if this replica still holds it: holder
// empty, leaseDurationSeconds 1 (as client-go's ReleaseOnCancel).
func (e *Elector) release() {
	if e.observed == nil || ptrOr(e.observed.Spec.HolderIdentity, "") != e.cfg.Identity {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RenewDeadline)
	defer cancel()
	now := e.cfg.Now()
	spec := coordinationv1.LeaseSpec{
		HolderIdentity:       ptr(""),
		LeaseDurationSeconds: ptr(int32(1)),
		RenewTime:            &metav1.MicroTime{Time: now},
		AcquireTime:          &metav1.MicroTime{Time: now},
		LeaseTransitions:     e.observed.Spec.LeaseTransitions,
	}
	if _, _, err := e.put(ctx, e.observed, spec, e.observedRev); err != nil {
		e.cfg.Logger.Warn("leader election: the lease could not be released; it expires", "lease", e.key, "error", err)
		return
	}
	e.cfg.Logger.Info("leader election: released the lease", "lease", e.key, "identity", e.cfg.Identity)
}

// get reads the Lease and its mod revision: nil and 0 when there is none.
func (e *Elector) get(ctx context.Context) (*coordinationv1.Lease, int64, error) {
	resp, err := e.cfg.KV.Range(ctx, &storev1.RangeRequest{Key: []byte(e.key)})
	if err != nil {
		return nil, 0, fmt.Errorf("reading %s: %w", e.key, err)
	}
	if len(resp.GetKvs()) == 0 {
		return nil, 0, nil
	}
	kv := resp.GetKvs()[0]
	value := kv.GetValue()
	if e.cfg.Decrypt != nil {
		if value, err = e.cfg.Decrypt(ctx, e.key, value); err != nil {
			return nil, 0, fmt.Errorf("decrypting %s: %w", e.key, err)
		}
	}
	var lease coordinationv1.Lease
	if err := e.codec.DecodeStorage(value, kv.GetModRevision(), &lease); err != nil {
		return nil, 0, fmt.Errorf("decoding %s: %w", e.key, err)
	}
	return &lease, kv.GetModRevision(), nil
}

// put writes the Lease with spec if its mod revision is still rev (0: if
// it does not exist), keeping the stored object's metadata (uid, creation
// time, labels, annotations), and returns what it wrote, with the new mod
// revision.
func (e *Elector) put(ctx context.Context, stored *coordinationv1.Lease, spec coordinationv1.LeaseSpec, rev int64) (*coordinationv1.Lease, int64, error) {
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: e.cfg.Name, Namespace: e.cfg.Namespace}}
	if stored != nil {
		lease.ObjectMeta = *stored.ObjectMeta.DeepCopy()
		lease.ResourceVersion = ""
	}
	lease.Spec = spec
	cmp := &storev1.Compare{Key: []byte(e.key), Target: storev1.Compare_TARGET_MOD, Result: storev1.Compare_RESULT_EQUAL,
		TargetUnion: &storev1.Compare_ModRevision{ModRevision: rev}}
	if rev == 0 {
		cmp = &storev1.Compare{Key: []byte(e.key), Target: storev1.Compare_TARGET_CREATE, Result: storev1.Compare_RESULT_EQUAL,
			TargetUnion: &storev1.Compare_CreateRevision{CreateRevision: 0}}
		lease.UID = types.UID(uuid.NewString())
		lease.CreationTimestamp = metav1.Time{Time: e.cfg.Now().Truncate(time.Second)}
	}
	value, err := e.codec.EncodeStorage(lease)
	if err != nil {
		return nil, 0, fmt.Errorf("encoding %s: %w", e.key, err)
	}
	if e.cfg.Encrypt != nil {
		if value, err = e.cfg.Encrypt(ctx, e.key, value); err != nil {
			return nil, 0, fmt.Errorf("encrypting %s: %w", e.key, err)
		}
	}
	resp, err := e.cfg.KV.Txn(ctx, &storev1.TxnRequest{
		Compare: []*storev1.Compare{cmp},
		Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{Key: []byte(e.key), Value: value}}}},
	})
	if err != nil {
		return nil, 0, fmt.Errorf("writing %s: %w", e.key, err)
	}
	if !resp.GetSucceeded() {
		return nil, 0, fmt.Errorf("writing %s: %w", e.key, errConflict)
	}
	return lease, resp.GetHeader().GetRevision(), nil
}

func ptr[T any](v T) *T { return &v }

func ptrOr[T any](p *T, d T) T {
	if p == nil {
		return d
	}
	return *p
}

// jitter is d plus up to 20 %, so that replicas do not try in lockstep.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}
