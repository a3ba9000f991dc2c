package admissionclient

import (
	"github.com/meridian-cp/meridian/lib/telemetry"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics show whether the gateway follows the admission scope and how
// many admission calls it saved or sent again.
type metrics struct {
	synced  prometheus.Gauge
	skipped prometheus.Counter
	retries prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		synced: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meridian_apigateway_admission_scope_synced",
			Help: "1 while the gateway holds the admission service's scope (writes outside it skip admission), 0 while every write is sent to admission.",
		}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_apigateway_admission_skipped_total",
			Help: "Writes admitted without an admission call, because no admission policy could match them.",
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_apigateway_admission_retries_total",
			Help: "Admission calls sent again because the admission service was unreachable.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.synced, err = telemetry.Register(reg, m.synced); err != nil {
		return nil, err
	}
	if m.skipped, err = telemetry.Register(reg, m.skipped); err != nil {
		return nil, err
	}
	if m.retries, err = telemetry.Register(reg, m.retries); err != nil {
		return nil, err
	}
	return m, nil
}
