package audit

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are kube-apiserver's audit metrics.
type metrics struct {
	events prometheus.Counter
	// errors counts events lost, by plugin: "log" (a failed write),
	// "webhook" (a full buffer or a failed POST), "encode".
	errors *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		events: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "apiserver_audit_event_total", Help: "Counter of audit events generated and sent to the audit backends.",
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "apiserver_audit_error_total", Help: "Counter of audit events that failed to be audited properly, by plugin.",
		}, []string{"plugin"}),
	}
	if reg == nil {
		return m, nil
	}
	// A second auditor on the same registry (tests) shares the
	// collectors already registered.
	if err := reg.Register(m.events); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, err
		}
		m.events = are.ExistingCollector.(prometheus.Counter)
	}
	if err := reg.Register(m.errors); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, err
		}
		m.errors = are.ExistingCollector.(*prometheus.CounterVec)
	}
	return m, nil
}
