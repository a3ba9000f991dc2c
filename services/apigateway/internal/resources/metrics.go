package resources

import (
	"strconv"

	"github.com/meridian-cp/meridian/lib/telemetry"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics count where consistent reads were served.
type metrics struct {
	// consistentReads counts consistent lists sent to watchfanout, by
	// resource, whether watchfanout served them (success) and whether the
	// store served them instead (fallback): kube-apiserver's
	// apiserver_watch_cache_consistent_read_total, with its labels.
	consistentReads *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		consistentReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "apiserver_watch_cache_consistent_read_total",
			Help: "Consistent lists the gateway sent to watchfanout, by resource, by whether watchfanout served them (success) and whether the store served them instead (fallback).",
		}, []string{"resource", "success", "fallback"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.consistentReads, err = telemetry.Register(reg, m.consistentReads); err != nil {
		return nil, err
	}
	return m, nil
}

// consistentRead counts one consistent list sent to watchfanout.
func (m *metrics) consistentRead(resource string, success, fallback bool) {
	m.consistentReads.WithLabelValues(resource, strconv.FormatBool(success), strconv.FormatBool(fallback)).Inc()
}
