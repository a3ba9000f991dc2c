package healthz

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-cp/meridian/lib/telemetry"
)

// Metrics record the checks a Handler runs under kube-apiserver's names
// (k8s.io/component-base/metrics/prometheus/slis): kubernetes_healthcheck
// is 1 when the check last passed, 0 when it failed, and
// kubernetes_healthchecks_total counts the runs by status, both by check
// name and endpoint type (healthz, livez, readyz). An optional check that
// failed passed as far as these metrics go, as it did for the endpoint;
// Monitor's meridian_apigateway_dependency_degraded says it is degraded.
// A nil *Metrics records nothing.
type Metrics struct {
	last *prometheus.GaugeVec
	runs *prometheus.CounterVec
}

// NewMetrics returns the metrics, registered on reg (nil: nowhere).
// Handlers of several endpoints share one.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		last: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kubernetes_healthcheck",
			Help: "This metric records the result of a single healthcheck.",
		}, []string{"name", "type"}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubernetes_healthchecks_total",
			Help: "This metric records the results of all healthcheck.",
		}, []string{"name", "type", "status"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.last, err = telemetry.Register(reg, m.last); err != nil {
		return nil, err
	}
	if m.runs, err = telemetry.Register(reg, m.runs); err != nil {
		return nil, err
	}
	return m, nil
}

// observe records one run of check name on the endpoint of type typ.
func (m *Metrics) observe(name, typ string, ok bool) {
	if m == nil {
		return
	}
	value, status := 1.0, "success"
	if !ok {
		value, status = 0, "error"
	}
	m.last.WithLabelValues(name, typ).Set(value)
	m.runs.WithLabelValues(name, typ, status).Inc()
}
