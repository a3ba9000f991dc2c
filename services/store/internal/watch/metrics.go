package watch

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	watchers prometheus.Gauge
	events   prometheus.Counter
	slow     prometheus.Counter
}

// newMetrics creates the hub's metrics and registers them on reg (none if
// reg is nil).
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		watchers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meridian_store_watchers", Help: "Number of registered watchers.",
		}),
		events: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_store_watch_events_sent_total", Help: "Events sent to watchers.",
		}),
		slow: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_store_slow_watchers_cancelled_total", Help: "Watchers cancelled because their queue was full.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.watchers, m.events, m.slow} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("watch: register metrics: %w", err)
			}
		}
	}
	return m, nil
}
