// Package apf is meridian's API Priority and Fairness core: it classifies
// requests by flow schema into priority levels, queues them fairly, and
// hands out seats, for every gateway of the fleet at once.
//
// A Controller serves the mandatory configuration of Kubernetes (flow
// schemas exempt, probes and catch-all) and the suggested global-default
// (see MandatorySchemas and Config). Loading FlowSchema and
// PriorityLevelConfiguration objects from the store comes later.
package apf

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Config.
const (
	DefaultCatchAllSeats      = 200
	DefaultGlobalDefaultSeats = 200
	DefaultQueues             = 128
	DefaultHandSize           = 6
	DefaultQueueLengthLimit   = 50
	DefaultMaxWait            = 15 * time.Second
	DefaultLease              = 30 * time.Second
	DefaultRetryAfter         = time.Second
)

// Config configures a Controller. Zero values mean the defaults.
type Config struct {
	// CatchAllSeats is the concurrency limit of priority level catch-all,
	// in seats; default 200. Like Kubernetes' catch-all it has no queues:
	// a request that finds no free seat is rejected.
	CatchAllSeats int
	// GlobalDefaultSeats is the concurrency limit of priority level
	// global-default, in seats; default 200.
	GlobalDefaultSeats int
	// Queues, HandSize and QueueLengthLimit configure global-default's
	// queues; defaults 128, 6 and 50 as in Kubernetes.
	Queues, HandSize, QueueLengthLimit int
	// MaxWait is the longest a request waits in a queue before it is
	// rejected; default 15s.
	MaxWait time.Duration
	// Lease is how long a gateway's grants outlive its last heartbeat (or
	// Acquire); default 30s.
	Lease time.Duration
	// SweepInterval is how often expired gateways are looked for; default
	// Lease/4.
	SweepInterval time.Duration
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
	def(&c.CatchAllSeats, DefaultCatchAllSeats)
	def(&c.GlobalDefaultSeats, DefaultGlobalDefaultSeats)
	def(&c.Queues, DefaultQueues)
	def(&c.HandSize, DefaultHandSize)
	def(&c.QueueLengthLimit, DefaultQueueLengthLimit)
	defDur(&c.MaxWait, DefaultMaxWait)
	defDur(&c.Lease, DefaultLease)
	defDur(&c.SweepInterval, c.Lease/4)
	defDur(&c.RetryAfter, DefaultRetryAfter)
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
	positive("catch-all seats", c.CatchAllSeats)
	positive("global-default seats", c.GlobalDefaultSeats)
	positive("queues", c.Queues)
	positive("hand size", c.HandSize)
	positive("queue length limit", c.QueueLengthLimit)
	if c.Queues > 0 && c.HandSize > 0 {
		if _, err := newDealer(c.Queues, c.HandSize); err != nil {
			errs = append(errs, err)
		}
	}
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
	started time.Time
}

type schema struct {
	FlowSchema
	uid   string
	level *level
}

// Controller classifies, queues and grants. It is safe for concurrent use.
// Close stops its sweeper and fails waiting Acquires with ErrClosed.
type Controller struct {
	cfg        Config
	schemas    []*schema // by precedence, then name
	levels     map[string]*level
	exemptions []Exemption // of schemas; fixed with them

	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	// mu guards grants and gateways. It is never held while a level's mu
	// is taken.
	mu struct {
		sync.Mutex
		grants   map[string]*held
		gateways map[string]*gateway
	}
}

// gateway is the liveness and grants of one gateway replica.
type gateway struct {
	lastSeen time.Time
	grants   map[string]*held
}

// New returns a Controller serving the mandatory configuration and starts
// its sweeper of expired gateways.
func New(cfg Config) (*Controller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("apf: %w", err)
	}
	c := &Controller{cfg: cfg, levels: map[string]*level{}, closed: make(chan struct{})}
	c.mu.grants = map[string]*held{}
	c.mu.gateways = map[string]*gateway{}
	for _, pl := range []PriorityLevel{
		{Name: LevelExempt, Exempt: true},
		{Name: LevelCatchAll, Seats: cfg.CatchAllSeats},
		{Name: LevelGlobalDefault, Seats: cfg.GlobalDefaultSeats, Queuing: &Queuing{
			Queues: cfg.Queues, HandSize: cfg.HandSize, QueueLengthLimit: cfg.QueueLengthLimit,
		}},
	} {
		l, err := newLevel(pl, m)
		if err != nil {
			return nil, fmt.Errorf("apf: priority level %s: %w", pl.Name, err)
		}
		c.levels[pl.Name] = l
	}
	for _, fs := range MandatorySchemas() {
		l, ok := c.levels[fs.PriorityLevel]
		if !ok {
			return nil, fmt.Errorf("apf: flow schema %s names unknown priority level %s", fs.Name, fs.PriorityLevel)
		}
		c.schemas = append(c.schemas, &schema{FlowSchema: fs, uid: ObjectUID("flowschemas", fs.Name), level: l})
	}
	slices.SortFunc(c.schemas, func(a, b *schema) int {
		return cmp.Or(cmp.Compare(a.MatchingPrecedence, b.MatchingPrecedence), cmp.Compare(a.Name, b.Name))
	})
	c.exemptions = exemptions(c.schemas)
	c.wg.Add(1)
	go c.sweep()
	return c, nil
}

// classify returns the schema of d: the matching one of lowest precedence.
func (c *Controller) classify(d *Digest) *schema {
	for _, s := range c.schemas {
		if s.matches(d) {
			return s
		}
	}
	// catch-all matches everyone; unreachable with the mandatory schemas.
	return c.schemas[len(c.schemas)-1]
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
	if gatewayID == "" {
		return Grant{}, fmt.Errorf("%w: gateway_id is required", ErrInvalid)
	}
	select {
	case <-c.closed:
		return Grant{}, ErrClosed
	default:
	}
	c.touch(gatewayID)
	s := c.classify(&d)
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
		return g, nil
	}
	g.ID = newGrantID()
	h := &held{grant: g, gateway: gatewayID, level: s.level}
	r, wait, err := s.level.acquire(ctx, c.closed, s.Name, s.flowDistinguisher(&d), d.Width, c.cfg.MaxWait)
	if err != nil {
		return Grant{}, err
	}
	h.req = r
	h.grant.Seats = r.width
	h.grant.QueueWait = wait
	h.started = time.Now()
	c.mu.Lock()
	gw := c.gatewayLocked(gatewayID)
	c.mu.grants[g.ID] = h
	gw.grants[g.ID] = h
	c.mu.Unlock()
	// The caller may have gone while we waited for the lock; then nobody
	// would release the seats.
	if err := ctx.Err(); err != nil {
		_ = c.Release(context.WithoutCancel(ctx), g.ID)
		return Grant{}, err
	}
	return h.grant, nil
}

// Release returns a grant's seats and dispatches waiting requests. It fails
// with ErrUnknownGrant when the grant is not held (released before, or
// expired with its gateway).
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
	}
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownGrant, grantID)
	}
	h.level.release(h.req, time.Since(h.started))
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
	c.closeOnce.Do(func() { close(c.closed) })
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

// sweep releases the grants of gateways silent for longer than the lease.
func (c *Controller) sweep() {
	defer c.wg.Done()
	t := time.NewTicker(c.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-c.closed:
			return
		case now := <-t.C:
			c.expire(now)
		}
	}
}

// expire forgets the gateways last seen before now-Lease and releases
// their grants.
func (c *Controller) expire(now time.Time) {
	var expired []*held
	c.mu.Lock()
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
		h.level.release(h.req, 0)
	}
}

// Stats are a priority level's current seats and queued requests.
type Stats struct {
	SeatsInUse int
	Queued     int
}

// LevelStats returns the current state of a priority level, for tests and
// status pages; false when there is no such level.
func (c *Controller) LevelStats(name string) (Stats, bool) {
	l, ok := c.levels[name]
	if !ok {
		return Stats{}, false
	}
	return Stats{SeatsInUse: l.seatsInUse(), Queued: l.queued()}, true
}
