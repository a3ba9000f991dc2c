package authn

import (
	"github.com/meridian-cp/meridian/lib/telemetry"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count authentication attempts under kube-apiserver's name,
// authentication_attempts, by result: "success" (a user was
// authenticated), "error" (credentials were presented and rejected) or
// "failure" (none were presented where they are required). A request that
// fails authentication reaches no endpoint, so it is counted here and not
// under apiserver_request_total, whose labels it could otherwise fill with
// whatever path it named. A nil *Metrics counts nothing. Metrics are safe
// for concurrent use.
type Metrics struct {
	attempts *prometheus.CounterVec
}

// NewMetrics registers the metrics on reg; nil reg returns nil. Several
// front doors may share reg: they share the counter.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, nil
	}
	attempts, err := telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "authentication_attempts",
		Help: "Counter of authenticated attempts.",
	}, []string{"result"}))
	if err != nil {
		return nil, err
	}
	return &Metrics{attempts: attempts}, nil
}

// Observe counts one attempt with the outcome of Authenticate.
func (m *Metrics) Observe(ok bool, err error) {
	if m == nil {
		return
	}
	result := "failure"
	switch {
	case err != nil:
		result = "error"
	case ok:
		result = "success"
	}
	m.attempts.WithLabelValues(result).Inc()
}
