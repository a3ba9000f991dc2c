package raftnode

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	reg     prometheus.Registerer
	pending prometheus.Gauge
	propose prometheus.Histogram
	logSync prometheus.Histogram
	nudges  prometheus.Counter
	notices prometheus.Counter
	// followerNotices counts this member's follower notices accepted.
	followerNotices prometheus.Counter
	// relayedNotices counts this member's relayed notices accepted.
	relayedNotices prometheus.Counter
	etcd           *etcdMetrics
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		reg: reg,
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meridian_store_proposals_pending", Help: "Proposals waiting to be committed and applied.",
		}),
		propose: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meridian_store_proposal_duration_seconds",
			Help:    "Time from proposing a write to its application.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}),
		logSync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meridian_store_raft_log_fsync_duration_seconds",
			Help:    "Time of each synced raft log write (append, truncation, stable store).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		nudges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_store_raft_commit_nudges_total",
			Help: "Barriers the leader appended to tell followers of a commit no entry followed, where a member did not accept its commit notices (see raftnode's nudge.go).",
		}),
		notices: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_store_raft_commit_notices_total",
			Help: "Commit notices a follower accepted: it learned of a commit without waiting for the barrier (see raftnode's notice.go).",
		}),
		followerNotices: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_store_raft_follower_commit_notices_total",
			Help: "Commit notices this member sent as a follower, for entries it stored, that another member accepted: it learned of a commit before the leader told it (see raftnode's followernotice.go).",
		}),
		relayedNotices: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meridian_store_raft_relayed_commit_notices_total",
			Help: "Commit notices this member sent as a follower, for entries it applied, that a non-voter near it accepted (see raftnode's relay.go).",
		}),
	}
	m.etcd = newEtcdMetrics()
	return m, m.register(m.pending, m.propose, m.logSync, m.nudges, m.notices, m.followerNotices, m.relayedNotices)
}

func (m *metrics) register(cs ...prometheus.Collector) error {
	if m.reg == nil {
		return nil
	}
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return fmt.Errorf("raftnode: register metrics: %w", err)
		}
	}
	return nil
}

// observe registers gauges that read the node's raft state, and the
// etcd-named metrics.
func (m *metrics) observe(n *Node) {
	_ = m.register(m.etcd.collectors(n)...)
	_ = m.register(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meridian_store_raft_state",
			Help: "Raft state of this member: 0 follower, 1 candidate, 2 leader, 3 shutdown.",
		}, func() float64 { return float64(n.raft.State()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meridian_store_raft_term", Help: "Current raft term.",
		}, func() float64 { return float64(n.raft.CurrentTerm()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meridian_store_raft_commit_index", Help: "Raft commit index known to this member.",
		}, func() float64 { return float64(n.raft.CommitIndex()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meridian_store_applied_index", Help: "Raft index applied by the state machine.",
		}, func() float64 { return float64(n.fsm.AppliedIndex()) }),
	)
}
