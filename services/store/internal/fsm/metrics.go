package fsm

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	apply    prometheus.Histogram
	commit   prometheus.Histogram
	batch    prometheus.Histogram
	snapshot prometheus.Histogram
	// etcdCommit is commit under etcd's name and buckets.
	etcdCommit prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		apply: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meridian_store_apply_duration_seconds",
			Help:    "Time to apply one batch of raft entries to the state machine, commit included.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meridian_store_backend_commit_duration_seconds",
			Help:    "Time to commit one state-machine batch to pebble.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meridian_store_apply_batch_entries",
			Help:    "Raft entries applied per state-machine batch (group commit).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
		snapshot: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meridian_store_snapshot_persist_duration_seconds",
			Help:    "Time to persist a raft snapshot of the state machine.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		etcdCommit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "etcd_disk_backend_commit_duration_seconds",
			Help:    "The latency distributions of commit called by backend.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.apply, m.commit, m.batch, m.snapshot, m.etcdCommit} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("fsm: register metrics: %w", err)
			}
		}
	}
	return m, nil
}
