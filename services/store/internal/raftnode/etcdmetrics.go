package raftnode

import (
	"context"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// etcdBuckets are etcd's buckets of its disk latency histograms (1ms to
// about 8s), so that etcd's dashboards and alerts read ours unchanged.
var etcdBuckets = prometheus.ExponentialBuckets(0.001, 2, 14)

// etcdMetrics are the member's metrics under etcd's names and meanings,
// for existing etcd dashboards and alerts, beside the meridian_store_*
// ones:
//
//   - etcd_server_has_leader, etcd_server_is_leader: 1 or 0;
//   - etcd_server_leader_changes_seen_total: leader changes this member
//     saw since it started;
//   - etcd_server_proposals_committed_total / _applied_total: the raft
//     commit and applied indexes (etcd's are the same counts);
//   - etcd_disk_wal_fsync_duration_seconds: every synced write of the raft
//     log (append, truncation) and of raft's stable store, what etcd's WAL
//     fsyncs hold.
type etcdMetrics struct {
	walFsync      prometheus.Histogram
	leaderChanges prometheus.Counter
}

func newEtcdMetrics() *etcdMetrics {
	return &etcdMetrics{
		walFsync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "etcd_disk_wal_fsync_duration_seconds",
			Help:    "The latency distributions of fsync called by WAL.",
			Buckets: etcdBuckets,
		}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "etcd_server_leader_changes_seen_total",
			Help: "The number of leader changes seen.",
		}),
	}
}

func (e *etcdMetrics) collectors(n *Node) []prometheus.Collector {
	return []prometheus.Collector{
		e.walFsync, e.leaderChanges,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "etcd_server_has_leader", Help: "Whether or not a leader exists. 1 is existence, 0 is not.",
		}, func() float64 {
			if _, id := n.raft.LeaderWithID(); id != "" {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "etcd_server_is_leader", Help: "Whether or not this member is a leader. 1 if is, 0 otherwise.",
		}, func() float64 {
			if n.IsLeader() {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "etcd_server_proposals_committed_total", Help: "The total number of consensus proposals committed.",
		}, func() float64 { return float64(n.raft.CommitIndex()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "etcd_server_proposals_applied_total", Help: "The total number of consensus proposals applied.",
		}, func() float64 { return float64(n.fsm.AppliedIndex()) }),
	}
}

// countLeaderChanges counts the leader changes raft reports until ctx
// ends.
func (e *etcdMetrics) countLeaderChanges(ctx context.Context, r *raft.Raft) {
	ch := make(chan raft.Observation, 8)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	r.RegisterObserver(obs)
	defer r.DeregisterObserver(obs)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			e.leaderChanges.Inc()
		}
	}
}
