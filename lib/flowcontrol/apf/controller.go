// Package apf is meridian's API Priority and Fairness core: it classifies
// requests by flow schema into priority levels, queues them fairly, and
// hands out seats, for every gateway of the fleet at once.
//
// A Controller serves a Configuration: the mandatory and suggested
// objects (Bootstrap) until Configure gives it the stored FlowSchemas and
// PriorityLevelConfigurations (see Convert), then each new version of
// them as they change.
package apf

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
)

// Defaults of Config.
const (
	// DefaultServerConcurrencyLimit is kube-apiserver's default
	// --max-requests-inflight (400) plus --max-mutating-requests-inflight
	// (200).
	DefaultServerConcurrencyLimit = 600
	DefaultMaxWait                = 15 * time.Second
	DefaultLease                  = 30 * time.Second
	DefaultRetryAfter             = time.Second
)

// Config configures a Controller. Zero values mean the defaults.
type Config struct {
	// ServerConcurrencyLimit is the seats of the whole fleet, split over
	// the limited priority levels by their nominal concurrency shares;
	// default 600.
	ServerConcurrencyLimit int
	// MaxWait is the longest a request waits in a queue before it is
	// rejected; default 15s.
	MaxWait time.Duration
	// Lease is how long a gateway's grants outlive its last heartbeat (or
	// Acquire); default 30s.
	Lease time.Duration
	// SweepInterval is how often expired gateways are looked for; default
	// Lease/4.
	SweepInterval time.Duration
	// BorrowingPeriod is how often the limited levels' limits are
	// adjusted to their demand (borrow.go); default 10s, negative never.
	BorrowingPeriod time.Duration
	// RetryAfter is what rejected clients are told to wait; default 1s.
	RetryAfter time.Duration
	// Registerer receives the metrics; nil means none.
	Registerer prometheus.Registerer
	// Logger; nil means slog.Default().
	Logger *slog.Logger
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defDur := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.ServerConcurrencyLimit, DefaultServerConcurrencyLimit)
	defDur(&c.MaxWait, DefaultMaxWait)
	defDur(&c.Lease, DefaultLease)
	defDur(&c.SweepInterval, c.Lease/4)
	defDur(&c.RetryAfter, DefaultRetryAfter)
	defDur(&c.BorrowingPeriod, DefaultBorrowingPeriod)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports every problem of c (after defaults) at once.
func (c Config) Validate() error {
	c = c.WithDefaults()
	var errs []error
	positive := func(name string, v int) {
		if v < 1 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %d", name, v))
		}
	}
	positiveDur := func(name string, v time.Duration) {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %s", name, v))
		}
	}
	positive("server concurrency limit", c.ServerConcurrencyLimit)
	positiveDur("max wait", c.MaxWait)
	positiveDur("lease", c.Lease)
	positiveDur("sweep interval", c.SweepInterval)
	positiveDur("retry after", c.RetryAfter)
	if c.SweepInterval > c.Lease {
		errs = append(errs, fmt.Errorf("sweep interval %s exceeds the lease %s", c.SweepInterval, c.Lease))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("apf: invalid config: %w", err)
	}
	return nil
}

// Grant is a set of seats held by a running request.
type Grant struct {
	ID               string
	FlowSchema       string
	FlowSchemaUID    string
	PriorityLevel    string
	PriorityLevelUID string
	// Seats held; 0 for an exempt grant.
	Seats  int
	Exempt bool
	// QueueWait is how long the request waited in its queue.
	QueueWait time.Duration
}

// held is a grant in the Controller's table.
type held struct {
	grant   Grant
	gateway string
	level   *level
	req     *request
	// linger is how long its seats stay taken after its Release
	// (Digest.AdditionalLatency).
	linger time.Duration
}

type schema struct {
	FlowSchema
	uid   string
	level *level
}

// state is one configuration as served: immutable once published.
type state struct {
	schemas    []*schema // by precedence, then name
	levels     map[string]*level
	exemptions []Exemption // of schemas
	// changed is closed when a new state replaces this one.
	changed chan struct{}
}

// Controller classifies, queues and grants. It is safe for concurrent use.
// Close stops its sweeper and fails waiting Acquires with ErrClosed.
type Controller struct {
	cfg     Config
	metrics *metrics
	cur     atomic.Pointer[state]
	// ids makes the grant IDs.
	ids *grantIDs
	// configMu serializes Apply.
	configMu sync.Mutex

	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	// mu guards grants, gateways and released. A level's mu may be
	// taken while it is held (Adopt), never the other way round.
	mu struct {
		sync.Mutex
		grants   map[string]*held
		gateways map[string]*gateway
		// released are the ids of grants released while not held, with
		// when: their Adopt may still come (adopt.go).
		released map[string]time.Time
	}
}

// gateway is the liveness and grants of one gateway replica.
type gateway struct {
	lastSeen time.Time
	grants   map[string]*held
}

// New returns a Controller serving the bootstrap configuration
// (Bootstrap) and starts its sweeper of expired gateways.
func New(cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("apf: %w", err)
	}
	ids, err := newGrantIDs()
	if err != nil {
		return nil, fmt.Errorf("apf: %w", err)
	}
	c := &Controller{cfg: cfg, metrics: m, ids: ids, closed: make(chan struct{})}
	c.mu.grants = map[string]*held{}
	c.mu.gateways = map[string]*gateway{}
	c.mu.released = map[string]time.Time{}
	c.cur.Store(&state{levels: map[string]*level{}, changed: make(chan struct{})})
	if err := c.Apply(Bootstrap(cfg.ServerConcurrencyLimit)); err != nil {
		return nil, err
	}
	c.wg.Add(1)
	go c.every(c.cfg.SweepInterval, c.expire)
	if cfg.BorrowingPeriod > 0 {
		c.wg.Add(1)
		go c.every(cfg.BorrowingPeriod, c.AdjustBorrowing)
	}
	return c, nil
}

// every calls f with the time every period until the Controller closes:
// the sweep of silent gateways (expire) and the borrowing adjustment.
// It is one of c.wg's goroutines.
func (c *Controller) every(period time.Duration, f func(now time.Time)) {
	defer c.wg.Done()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-c.closed:
			return
		case now := <-t.C:
			f(now)
		}
	}
}

// AdjustBorrowing sets the limited levels' current limits from their
// demand since the last adjustment (borrow.go); the Controller calls it
// every BorrowingPeriod.
func (c *Controller) AdjustBorrowing(now time.Time) {
	c.configMu.Lock()
	defer c.configMu.Unlock()
	st := c.cur.Load()
	levels := make([]*level, 0, len(st.levels))
	for _, l := range st.levels {
		levels = append(levels, l)
	}
	adjustBorrowing(levels, c.cfg.ServerConcurrencyLimit, now)
}

// Configure serves the configuration of these objects (Convert, with the
// server concurrency limit of the Controller's Config).
func (c *Controller) Configure(schemas []*flowcontrolv1.FlowSchema, levels []*flowcontrolv1.PriorityLevelConfiguration) error {
	return c.Apply(Convert(schemas, levels, c.cfg.ServerConcurrencyLimit))
}

// Apply serves conf from now on. A level of the same name and UID as
// one served keeps its seats and queued requests and is reconfigured in
// place (level.reconfigure); a level no longer served drains: its queued
// requests are dispatched as its seats are released, and new requests
// no longer reach it. A level whose queuing parameters are invalid
// rejects instead of queuing. Exemptions' channel is closed.
func (c *Controller) Apply(conf Configuration) error {
	c.configMu.Lock()
	defer c.configMu.Unlock()
	old := c.cur.Load()
	next := &state{levels: map[string]*level{}, changed: make(chan struct{})}
	for _, pl := range conf.Levels {
		if pl.Queuing != nil {
			if _, err := newDealer(pl.Queuing.Queues, pl.Queuing.HandSize); err != nil {
				c.cfg.Logger.Warn("priority level's queuing is invalid; it rejects instead", "priority_level", pl.Name, "error", err)
				pl.Queuing = nil
			}
		}
		if l := old.levels[pl.Name]; l != nil && l.cfg.Exempt == pl.Exempt && (pl.UID == "" || l.uid == pl.UID) {
			if err := l.reconfigure(pl); err != nil {
				return fmt.Errorf("apf: priority level %s: %w", pl.Name, err)
			}
			next.levels[pl.Name] = l
			continue
		}
		l, err := newLevel(pl, c.metrics)
		if err != nil {
			return fmt.Errorf("apf: priority level %s: %w", pl.Name, err)
		}
		next.levels[pl.Name] = l
	}
	for name := range old.levels {
		if _, ok := next.levels[name]; !ok {
			c.metrics.nominalLimit.DeleteLabelValues(name)
			c.metrics.currentLimit.DeleteLabelValues(name)
		}
	}
	for _, fs := range conf.Schemas {
		l, ok := next.levels[fs.PriorityLevel]
		if !ok {
			continue // dangling
		}
		uid := fs.UID
		if uid == "" {
			uid = ObjectUID("flowschemas", fs.Name)
		}
		next.schemas = append(next.schemas, &schema{FlowSchema: fs, uid: uid, level: l})
	}
	slices.SortFunc(next.schemas, func(a, b *schema) int {
		return cmp.Or(cmp.Compare(a.MatchingPrecedence, b.MatchingPrecedence), cmp.Compare(a.Name, b.Name))
	})
	if len(next.schemas) == 0 {
		return errors.New("apf: a configuration without flow schemas")
	}
	next.exemptions = exemptions(next.schemas)
	c.cur.Store(next)
	close(old.changed)
	return nil
}

// classify returns the schema of d: the matching one of lowest precedence,
// or the last (catch-all) when none matches.
func (s *state) classify(d *Digest) *schema {
	for _, sc := range s.schemas {
		if sc.matches(d) {
			return sc
		}
	}
	return s.schemas[len(s.schemas)-1]
}

// classify classifies d by the current configuration.
func (c *Controller) classify(d *Digest) *schema { return c.cur.Load().classify(d) }

// Classification is the flow schema and priority level a request is
// classified into.
type Classification struct {
	FlowSchema, FlowSchemaUID       string
	PriorityLevel, PriorityLevelUID string
	// Exempt: the level is exempt, Acquire would grant the request at
	// once and hold nothing.
	Exempt bool
}

// Classify classifies d by the configuration served now, as Acquire
// would, without queuing it, taking seats or counting a gateway's
// heartbeat: a gateway that follows the configuration through its own
// Controller decides exempt requests with it (flowcontrolclient).
func (c *Controller) Classify(d *Digest) Classification {
	s := c.classify(d)
	return Classification{
		FlowSchema: s.Name, FlowSchemaUID: s.uid,
		PriorityLevel: s.level.cfg.Name, PriorityLevelUID: s.level.uid,
		Exempt: s.level.cfg.Exempt,
	}
}

// Acquire classifies d and blocks until its request is dispatched from its
// queue, then returns the grant, held for gatewayID until Release or until
// that gateway's lease expires. An exempt grant holds nothing and has no
// ID: there is nothing to release. An Acquire counts as a heartbeat of
// gatewayID.
//
// It fails with a *RejectedError (errors.Is ErrRejected) when the request
// cannot be queued or waits longer than MaxWait, with ctx's error when ctx
// is done first (the request leaves its queue), with ErrInvalid for an
// empty gatewayID, and with ErrClosed after Close.
func (c *Controller) Acquire(ctx context.Context, gatewayID string, d Digest) (Grant, error) {
	return c.acquire(ctx, gatewayID, d)
}

// AcquireFunc is Acquire for a caller that must not block. When the
// request is granted or rejected at once (an exempt level; free seats
// and its turn; a full queue) it returns Acquire's answer and a zero
// Queued. Otherwise the request waits in its queue, AcquireFunc returns
// it as a Queued (Waiting true), and done is called once with what
// Acquire would have returned: by the goroutine that dispatches the
// request (a Release, a reconfiguration, a borrowing adjustment) or
// takes it out of its queue (MaxWait, ctx's end, Queued.Cancel, Close),
// with no lock of the Controller held. done should be quick: other
// requests' answers wait behind it. A request waits without a goroutine
// or a timer of its own; a ctx that is never done (Done nil) costs
// nothing to watch, so a caller that cancels requests one by one can
// use Queued.Cancel instead of a context per request.
func (c *Controller) AcquireFunc(ctx context.Context, gatewayID string, d Digest, done func(Grant, error)) (Grant, Queued, error) {
	s, h, g, err := c.start(gatewayID, &d)
	if h == nil {
		return g, Queued{}, err
	}
	l := s.level
	r, wait, err, queued := l.acquireFunc(ctx, c.closed, s.Name, s.flowDistinguisher(&d), &d, c.cfg.MaxWait, func(r *request, wait time.Duration, err error) {
		done(c.admitted(ctx, s, h, r, wait, err))
	})
	if queued != nil {
		return Grant{}, Queued{l: l, r: queued}, nil
	}
	g, err = c.admitted(ctx, s, h, r, wait, err)
	return g, Queued{}, err
}

// Queued is a request AcquireFunc left waiting in its queue; the zero
// Queued is none: the request was decided at once.
type Queued struct {
	l *level
	r *request
}

// Waiting reports whether AcquireFunc queued the request, so that its
// done will be called.
func (q Queued) Waiting() bool { return q.r != nil }

// Cancel takes the request out of its queue if it is still queued; its
// done then gets context.Canceled. After the request was decided it does
// nothing; it may be called from any goroutine, more than once, but not
// from done or with a lock that done takes (it may call done).
func (q Queued) Cancel() {
	if q.r != nil {
		q.l.cancel(q.r)
	}
}

// acquire is Acquire.
func (c *Controller) acquire(ctx context.Context, gatewayID string, d Digest) (Grant, error) {
	s, h, g, err := c.start(gatewayID, &d)
	if h == nil {
		return g, err
	}
	r, wait, err := s.level.acquire(ctx, c.closed, s.Name, s.flowDistinguisher(&d), &d, c.cfg.MaxWait)
	return c.admitted(ctx, s, h, r, wait, err)
}

// start checks and classifies a request. It returns the grant to record
// once the request is admitted, or, with a nil grant record, the answer:
// an exempt grant or an error.
func (c *Controller) start(gatewayID string, d *Digest) (*schema, *held, Grant, error) {
	if gatewayID == "" {
		return nil, nil, Grant{}, fmt.Errorf("%w: gateway_id is required", ErrInvalid)
	}
	select {
	case <-c.closed:
		return nil, nil, Grant{}, ErrClosed
	default:
	}
	c.touch(gatewayID)
	s := c.classify(d)
	g := Grant{
		FlowSchema:       s.Name,
		FlowSchemaUID:    s.uid,
		PriorityLevel:    s.level.cfg.Name,
		PriorityLevelUID: s.level.uid,
		Exempt:           s.level.cfg.Exempt,
	}
	if g.Exempt {
		// Nothing is held, so nothing is recorded: gateways do not release
		// exempt grants, and a recorded one would stay until its gateway
		// went silent.
		return nil, nil, g, nil
	}
	g.ID = c.ids.newID()
	d.Width = max(d.Width, d.FinalSeats)
	return s, &held{grant: g, gateway: gatewayID, level: s.level, linger: max(d.AdditionalLatency, 0)}, Grant{}, nil
}

// admitted ends a request of schema s that its level dispatched as r
// after wait, or failed with err: it records the grant h of a dispatched
// one and returns it.
func (c *Controller) admitted(ctx context.Context, s *schema, h *held, r *request, wait time.Duration, err error) (Grant, error) {
	if err != nil {
		var rej *RejectedError
		if errors.As(err, &rej) {
			rej.FlowSchemaUID, rej.PriorityLevelUID = s.uid, s.level.uid
		}
		return Grant{}, err
	}
	h.req = r
	h.grant.Seats = r.width
	h.grant.QueueWait = wait
	id := h.grant.ID
	c.mu.Lock()
	gw := c.gatewayLocked(h.gateway)
	c.mu.grants[id] = h
	gw.grants[id] = h
	c.mu.Unlock()
	// The caller may have gone while we waited for the lock; then nobody
	// would release the seats.
	if err := ctx.Err(); err != nil {
		_ = c.Release(context.WithoutCancel(ctx), id)
		return Grant{}, err
	}
	return h.grant, nil
}

// Release returns a grant's seats and dispatches waiting requests. It fails
// with ErrUnknownGrant when the grant is not held (released before, or
// expired with its gateway, or handed out by a previous leader and not
// adopted yet: its id is then remembered so that its Adopt charges
// nothing).
func (c *Controller) Release(_ context.Context, grantID string) error {
	if grantID == "" {
		return fmt.Errorf("%w: grant_id is required", ErrInvalid)
	}
	c.mu.Lock()
	h, ok := c.mu.grants[grantID]
	if ok {
		delete(c.mu.grants, grantID)
		if gw := c.mu.gateways[h.gateway]; gw != nil {
			delete(gw.grants, grantID)
		}
	} else {
		c.releasedLocked(grantID, time.Now())
	}
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownGrant, grantID)
	}
	c.finish(h)
	return nil
}

// Heartbeat keeps gatewayID's grants alive and returns the longest gap
// allowed between heartbeats, halved: the interval to send them at.
func (c *Controller) Heartbeat(_ context.Context, gatewayID string) (time.Duration, error) {
	if gatewayID == "" {
		return 0, fmt.Errorf("%w: gateway_id is required", ErrInvalid)
	}
	c.touch(gatewayID)
	return c.cfg.Lease / 2, nil
}

// RetryAfter is how long rejected clients should wait before retrying.
func (c *Controller) RetryAfter() time.Duration { return c.cfg.RetryAfter }

// Close stops the sweeper and fails queued Acquires with ErrClosed. Held
// grants stay held. It is safe to call more than once.
func (c *Controller) Close() error {
	c.closeOnce.Do(func() {
		close(c.closed)
		// The requests queued by AcquireFunc have no goroutine watching
		// closed: they are failed here. Those of levels no longer served
		// (draining) end by their own deadlines or contexts.
		for _, l := range c.cur.Load().levels {
			l.closeQueued()
		}
	})
	c.wg.Wait()
	return nil
}

func (c *Controller) touch(gatewayID string) {
	c.mu.Lock()
	c.gatewayLocked(gatewayID)
	c.mu.Unlock()
}

// gatewayLocked returns gatewayID's entry, created if missing, marked seen
// now.
func (c *Controller) gatewayLocked(gatewayID string) *gateway {
	gw := c.mu.gateways[gatewayID]
	if gw == nil {
		gw = &gateway{grants: map[string]*held{}}
		c.mu.gateways[gatewayID] = gw
	}
	gw.lastSeen = time.Now()
	return gw
}

// expire forgets the gateways last seen before now-Lease and releases
// their grants, and forgets the released ids remembered before then.
func (c *Controller) expire(now time.Time) {
	var expired []*held
	c.mu.Lock()
	c.forgetReleasedLocked(now)
	for id, gw := range c.mu.gateways {
		if now.Sub(gw.lastSeen) <= c.cfg.Lease {
			continue
		}
		for gid, h := range gw.grants {
			delete(c.mu.grants, gid)
			expired = append(expired, h)
		}
		delete(c.mu.gateways, id)
		if n := len(gw.grants); n > 0 {
			c.cfg.Logger.Warn("gateway lease expired; releasing its grants", "gateway", id, "grants", n)
		}
	}
	c.mu.Unlock()
	for _, h := range expired {
		h.level.release(h.req, false)
	}
}

// Forget releases every held grant and forgets every gateway, and returns
// how many grants it released: what a flow-control replica does when its
// term as leader ends, so that nothing it held outlives the term (the
// gateways re-register the grants they still hold with the new leader,
// Adopt, and this replica starts empty should it lead again).
func (c *Controller) Forget() int {
	var all []*held
	c.mu.Lock()
	for _, h := range c.mu.grants {
		all = append(all, h)
	}
	clear(c.mu.grants)
	clear(c.mu.gateways)
	clear(c.mu.released)
	c.mu.Unlock()
	for _, h := range all {
		h.level.release(h.req, false)
	}
	return len(all)
}

// Stats are a priority level's current seats and queued requests.
type Stats struct {
	SeatsInUse int
	Queued     int
}

// LevelStats returns the current state of a priority level, for tests and
// status pages; false when there is no such level.
func (c *Controller) LevelStats(name string) (Stats, bool) {
	l, ok := c.cur.Load().levels[name]
	if !ok {
		return Stats{}, false
	}
	return Stats{SeatsInUse: l.seatsInUse(), Queued: l.queued()}, true
}
