package healthz

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-cp/meridian/lib/telemetry"
)

// errNotChecked is the result of a monitored check before its first run
// has finished: the dependency is not known to work yet.
var errNotChecked = errors.New("healthz: not checked yet")

// MonitorConfig configures a Monitor.
type MonitorConfig struct {
	// Checks are the optional checks to run; each must have Degraded set
	// (a required check runs when the endpoint is asked, so that readiness
	// says what holds now).
	Checks []Check
	// Interval is the pause between the end of one run of a check and the
	// start of the next; default 2s.
	Interval time.Duration
	// Timeout bounds one run of a check; default 5s.
	Timeout time.Duration
	// Registerer receives meridian_apigateway_dependency_degraded; nil:
	// nowhere.
	Registerer prometheus.Registerer
	// Logger logs when a dependency becomes degraded and when it
	// recovers; nil means slog.Default().
	Logger *slog.Logger
}

// Monitor runs optional checks in the background, each on its own every
// Interval, and hands out checks (Checks) that return the latest results
// at once. An endpoint then answers without waiting for a dependency that
// does not answer — a probe's timeout would otherwise fail the whole
// endpoint on every replica alike — and the gauge
// meridian_apigateway_dependency_degraded{dependency} (1 while the check
// fails) follows each dependency whether or not anything asks the
// endpoints. Until a check's first run finishes it counts as failing.
type Monitor struct {
	cfg      MonitorConfig
	deps     []*dependency
	degraded *prometheus.GaugeVec
}

// dependency is one monitored check and its latest result.
type dependency struct {
	check Check
	last  atomic.Pointer[result]
}

// result is what one run of a check returned.
type result struct{ err error }

// NewMonitor returns a Monitor of cfg.Checks; Run runs them.
func NewMonitor(cfg MonitorConfig) (*Monitor, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = 2 * time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	var errs []error
	for _, c := range cfg.Checks {
		if c.Degraded == "" || c.Run == nil {
			errs = append(errs, fmt.Errorf("healthz: monitored check %q needs Run and Degraded", c.Name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	m := &Monitor{cfg: cfg, degraded: prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "meridian_apigateway_dependency_degraded",
		Help: "1 while the gateway works around a dependency that fails its health check (flow control, admission, watchfanout: see /readyz?verbose), 0 while the check passes.",
	}, []string{"dependency"})}
	if cfg.Registerer != nil {
		var err error
		if m.degraded, err = telemetry.Register(cfg.Registerer, m.degraded); err != nil {
			return nil, err
		}
	}
	for _, c := range cfg.Checks {
		d := &dependency{check: c}
		d.last.Store(&result{err: errNotChecked})
		m.degraded.WithLabelValues(c.Name).Set(1)
		m.deps = append(m.deps, d)
	}
	return m, nil
}

// Checks returns checks with the names and Degraded of the monitored ones
// that return their latest results without running them.
func (m *Monitor) Checks() []Check {
	out := make([]Check, 0, len(m.deps))
	for _, d := range m.deps {
		out = append(out, Check{Name: d.check.Name, Degraded: d.check.Degraded, Run: func(context.Context) error {
			return d.last.Load().err
		}})
	}
	return out
}

// Run runs every check until ctx ends, each in a goroutine of its own so
// that one that does not answer delays no other, and returns once they
// have stopped.
func (m *Monitor) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, d := range m.deps {
		wg.Go(func() { m.follow(ctx, d) })
	}
	wg.Wait()
}

// follow runs d's check every Interval until ctx ends.
func (m *Monitor) follow(ctx context.Context, d *dependency) {
	pause := time.NewTimer(0)
	defer pause.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-pause.C:
		}
		runCtx, cancel := context.WithTimeout(ctx, m.cfg.Timeout)
		err := d.check.Run(runCtx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		m.record(d, err)
		pause.Reset(m.cfg.Interval)
	}
}

// record sets the gauge, then stores a run's result (so that whoever sees
// the result sees the gauge agree), and logs a change. Only d's follow
// calls it.
func (m *Monitor) record(d *dependency, err error) {
	prev := d.last.Load().err
	name := d.check.Name
	if err != nil {
		m.degraded.WithLabelValues(name).Set(1)
	} else {
		m.degraded.WithLabelValues(name).Set(0)
	}
	d.last.Store(&result{err: err})
	wasFailing := prev != nil && !errors.Is(prev, errNotChecked)
	switch {
	case err != nil && !wasFailing:
		m.cfg.Logger.Warn("dependency degraded", "dependency", name, "impact", d.check.Degraded, "error", err)
	case err == nil && wasFailing:
		m.cfg.Logger.Info("dependency recovered", "dependency", name)
	}
}
