package resources

import (
	"strconv"

	"github.com/meridian-cp/meridian/lib/telemetry"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics count where consistent reads were served and where watches went
// on when their watchfanout replica was lost.
type metrics struct {
	// consistentReads counts consistent reads (lists, and gets when
	// watchfanout serves them in process) sent to watchfanout, by
	// resource, whether watchfanout served them (success) and whether the
	// store served them instead (fallback): kube-apiserver's
	// apiserver_watch_cache_consistent_read_total, with its labels.
	consistentReads *prometheus.CounterVec
	// watchResumes counts watches that lost their watchfanout replica, by
	// resource and by where they went on (resumeTo).
	watchResumes *prometheus.CounterVec
}

// Where a watch that lost its watchfanout replica went on (the "to" label
// of meridian_apigateway_watch_resumes_total).
const (
	// resumedOnReplica: on another replica, from the last event delivered.
	resumedOnReplica = "replica"
	// resumedOnStore: on the store, no replica being able to serve it.
	resumedOnStore = "store"
	// resumeExpired: nowhere; its initial events were cut short, and it
	// ended with 410 Expired.
	resumeExpired = "expired"
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		consistentReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "apiserver_watch_cache_consistent_read_total",
			Help: "Consistent reads (lists; gets when watchfanout runs in the gateway's process) the gateway sent to watchfanout, by resource, by whether watchfanout served them (success) and whether the store served them instead (fallback).",
		}, []string{"resource", "success", "fallback"}),
		watchResumes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meridian_apigateway_watch_resumes_total",
			Help: "Watches that lost their watchfanout replica (it went away, drained, or could not serve their resourceVersion), by resource and by where they went on: another replica, the store, or nowhere (expired: their initial events were cut short).",
		}, []string{"resource", "to"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.consistentReads, err = telemetry.Register(reg, m.consistentReads); err != nil {
		return nil, err
	}
	if m.watchResumes, err = telemetry.Register(reg, m.watchResumes); err != nil {
		return nil, err
	}
	return m, nil
}

// consistentRead counts one consistent read sent to watchfanout.
func (m *metrics) consistentRead(resource string, success, fallback bool) {
	m.consistentReads.WithLabelValues(resource, strconv.FormatBool(success), strconv.FormatBool(fallback)).Inc()
}

// watchResumed counts a watch of resource that lost its replica and went
// on to (resumedOnReplica, resumedOnStore, resumeExpired).
func (m *metrics) watchResumed(resource, to string) {
	m.watchResumes.WithLabelValues(resource, to).Inc()
}
