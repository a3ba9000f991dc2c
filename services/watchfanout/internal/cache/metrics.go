package cache

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// metrics are the cache's metrics, on an injected registerer.
type metrics struct {
	watchers   *prometheus.GaugeVec
	terminated *prometheus.CounterVec
	events     *prometheus.CounterVec
	// sizes is kube-apiserver's watch event size histogram, observed
	// beside events: one sample per queued event, the bytes of its
	// object as stored (what a protobuf watcher's frame carries).
	sizes    *prometheus.HistogramVec
	received *prometheus.CounterVec
	objects  *prometheus.GaugeVec
	// storage is objects under kube-apiserver's name and label
	// (resource: "configmaps", "deployments.apps"), which kube-apiserver
	// also reports from its watch cache.
	storage  *prometheus.GaugeVec
	history  *prometheus.GaugeVec
	revision prometheus.Gauge
	relists  prometheus.Counter
	// undecryptable counts stored values that did not decrypt.
	undecryptable prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	gvr := []string{"group", "version", "resource"}
	m := &metrics{
		watchers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "watchfanout_watchers", Help: "Registered watchers per resource.",
		}, gvr),
		terminated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "watchfanout_terminated_watchers_total", Help: "Watchers ended by the cache, by reason: too_slow (buffer overflow) or reset (cache re-listed).",
		}, append(gvr, "reason")),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "apiserver_watch_events_total", Help: "Events queued to watchers.",
		}, gvr),
		sizes: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "apiserver_watch_events_sizes", Help: "Watch event size distribution in bytes.",
			// kube-apiserver's buckets.
			Buckets: prometheus.ExponentialBuckets(1024, 2.0, 8),
		}, gvr),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "apiserver_watch_cache_events_received_total", Help: "Events the cache received from the store.",
		}, gvr),
		objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "watchfanout_cache_objects", Help: "Objects in the cache per resource.",
		}, gvr),
		storage: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "apiserver_storage_objects", Help: "Number of stored objects at the time of last check split by kind.",
		}, []string{"resource"}),
		history: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "watchfanout_cache_history_events", Help: "Events in the history per resource.",
		}, gvr),
		revision: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "watchfanout_cache_revision", Help: "The store revision the cache has fully applied.",
		}),
		relists: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "watchfanout_cache_lists_total", Help: "Lists of the whole state from the store (start and re-lists after compaction).",
		}),
		undecryptable: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "watchfanout_cache_undecryptable_values_total", Help: "Stored values the cache could not decrypt (encryption at rest); reads of those objects fail.",
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.watchers, m.terminated, m.events, m.sizes, m.received, m.objects, m.storage, m.history, m.revision, m.relists, m.undecryptable} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}

// resourceMetrics are metrics curried for one resource.
type resourceMetrics struct {
	watchers, objects, history prometheus.Gauge
	storage                    prometheus.Gauge
	events, received           prometheus.Counter
	sizes                      prometheus.Observer
	tooSlow, reset             prometheus.Counter
}

func (m *metrics) forResource(group, version, resource string) *resourceMetrics {
	l := prometheus.Labels{"group": group, "version": version, "resource": resource}
	with := func(reason string) prometheus.Counter {
		return m.terminated.With(prometheus.Labels{"group": group, "version": version, "resource": resource, "reason": reason})
	}
	return &resourceMetrics{
		watchers: m.watchers.With(l), objects: m.objects.With(l), history: m.history.With(l),
		storage: m.storage.WithLabelValues(schema.GroupResource{Group: group, Resource: resource}.String()),
		events:  m.events.With(l), sizes: m.sizes.With(l), received: m.received.With(l),
		tooSlow: with("too_slow"), reset: with("reset"),
	}
}

func (m *resourceMetrics) terminated(err error) {
	switch {
	case errors.Is(err, ErrTooSlow):
		m.tooSlow.Inc()
	case errors.Is(err, ErrReset):
		m.reset.Inc()
	}
}

// forget deletes the series of a resource no longer served (a custom
// resource whose CRD was deleted or replaced), so they do not linger at
// their last values.
func (m *metrics) forget(gvr schema.GroupVersionResource) {
	l := prometheus.Labels{"group": gvr.Group, "version": gvr.Version, "resource": gvr.Resource}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{m.watchers, m.objects, m.history, m.events, m.sizes, m.received, m.terminated} {
		v.DeletePartialMatch(l)
	}
	m.storage.DeleteLabelValues(gvr.GroupResource().String())
}
