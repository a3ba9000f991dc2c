package raftnode

import (
	"context"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// Relayed commit notices: a voter that learned of a commit early tells
// the non-voters beside it.
//
// With four or five voters a follower learns of a commit from another
// follower's notice (followernotice.go), half a round trip after the
// leader wrote the entry, where the leader learns of it a round trip to
// the nearest majority after. A non-voter's copy never counts, so no
// follower notice goes to one: it learns of the commit from the leader's
// notice (notice.go), that round trip plus the half of its own. A region
// served by a non-voter of its own, beside voters of its own (a 2+2+1
// spread with a non-voter in each region, as the chart's example lays
// it out), would see a write a round trip later than its voters.
//
// So a voter that applies, as a follower, a command that came after a
// pause in the writes sends each non-voter near it a commit notice of its
// own: the AppendEntries the leader would send it, in the leader's name
// and current term, carrying the entries applied (read from its log) and
// committing the last. What it claims is true whoever sends it: a voter
// applies only entries committed, which every leader of this term or later
// holds, so the notice is one the leader could send. The non-voter's raft
// checks it like any other: it stores what it lacks (log matching on the
// entry before those carried) before it applies, and refuses a notice of
// a term older than its own.
//
// Near means measured (distance.go): the voter relays only while the
// leader is far from it and the non-voter much nearer. A voter beside the
// leader learns of commits when the leader does, and the leader's notice
// reaches the non-voters beside them both as soon; a non-voter as far as
// the leader is better told by the leader, whose notice crosses the
// distance once. And only in groups where a follower can learn of a
// commit before the leader (four or five voters, followernotice.go):
// elsewhere a voter learns of it from the leader's notice, at the same
// moment as the non-voters.

// relays is a voter's plan for relayed commit notices and the batch it
// last applied that its relays have not sent yet.
type relays struct {
	batchQueue
	// plan is the last measurement's plan (nil until the first, and
	// while this node leads or has no leader).
	plan atomic.Pointer[relayPlan]
	// remeasure asks for a new plan now: the leader or the configuration
	// changed. Capacity 1.
	remeasure chan struct{}
}

func newRelays() *relays {
	return &relays{batchQueue: newBatchQueue(), remeasure: make(chan struct{}, 1)}
}

// relayPlan is whom this voter relays commits to while leader leads: the
// non-voters near it (relayTargets).
type relayPlan struct {
	leader raft.ServerID
	to     []raft.Server
}

// relayApplied hands logs, committed and about to be applied by this
// node's FSM as a follower, to the relays when the plan has targets for
// the leader of the moment. It runs on raft's FSM goroutine and only
// hands them on: the notice is built and sent on relayCommits'.
func (n *Node) relayApplied(logs []*raft.Log) {
	p := n.relays.plan.Load()
	addr, id := n.raft.LeaderWithID()
	if p == nil || id != p.leader {
		signal(n.relays.remeasure) // a new leader: its distance is not measured
		return
	}
	if len(p.to) == 0 {
		return
	}
	n.relays.put(&followerBatch{logs: logs, term: n.raft.CurrentTerm(), leaderID: id, leaderAddr: addr})
}

// relayCommits sends the relayed notices of each batch relayApplied hands
// on, until ctx ends.
func (n *Node) relayCommits(ctx context.Context) {
	r := n.relays
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.signal:
		}
		b := r.take()
		p := r.plan.Load()
		if b == nil || p == nil || p.leader != b.leaderID {
			continue
		}
		if b = n.fromLog(b); b != nil {
			n.notices.notifyAsFollower(p.to, n.followerNoticeRequest(b))
		}
	}
}

// fromLog is b with its entries read from the log, every index from b's
// first to its last: the FSM is handed commands and configurations only,
// so a batch applied may skip the barriers and no-ops between them, and a
// notice carries consecutive entries. It is nil when one cannot be read
// (compacted away). At most maxNoticeEntries are read, the last ones.
func (n *Node) fromLog(b *followerBatch) *followerBatch {
	first, last := b.logs[0].Index, b.last()
	if last-first >= maxNoticeEntries {
		first = last - maxNoticeEntries + 1
	}
	logs, err := n.readLogs(first, last)
	if err != nil {
		return nil
	}
	return &followerBatch{logs: logs, term: b.term, leaderID: b.leaderID, leaderAddr: b.leaderAddr}
}
