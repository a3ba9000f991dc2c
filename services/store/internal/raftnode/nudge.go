package raftnode

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/meridian-cp/meridian/services/store/internal/fsm"
)

// Telling followers about commits.
//
// A follower applies an entry only once it learns that the entry is
// committed, and it learns that from the leader's next AppendEntries,
// which carries the leader's commit index. etcd's raft sends one as soon
// as the commit index moves. hashicorp/raft does not: it sends the next
// one when new entries arrive, or after CommitTimeout (to twice that)
// when none do. Under a steady stream of writes the next entries carry
// the news; after the last write of a burst, or under sparse writes,
// followers — and the watchers and reads they serve — wait for
// CommitTimeout.
//
// So the leader nudges: once entries are committed (raft hands them to
// its FSM, nudgingFSM), if no entry follows them in the log — at once
// after a lone write, after a moment (nudgeDelay) while writes come close
// together — the leader tells the followers: with commit notices, and a
// barrier where those do not suffice (below). The barrier reaches the FSM
// of no member (raft keeps barrier entries to itself, see waitApplied),
// but the AppendEntries that carries it carries the new commit index,
// and raft sends it at once. One nudge is in flight at a time; proposals
// applied meanwhile are covered by the check after it (an entry that
// follows a commit will be committed and nudged itself). A proposal
// appended between the check and the barrier commits with the barrier,
// after the barrier's AppendEntries left with the older commit index:
// that nudge covers only the older index (coveredBy), so the proposal's
// own signal nudges again.
//
// The barrier's AppendEntries waits for the answer to the one in flight to
// that follower, a round trip over a long link, and for the barrier's
// write to the leader's log and then the follower's; the commit notice
// sent with each nudge (notice.go) waits for neither. So the nudge starts
// with the notices, and the barrier is only the fallback: the nudger
// waits for every member's answer to them, and appends the barrier only
// when one refused (it lacked the committed entry), could not be sent
// one, or did not answer within noticeWait. Where every member accepts,
// as on a healthy group, no barrier is appended. That spares each member
// a log write per pause in the writes, and spares the next write a wait:
// raft sends each follower one AppendEntries at a time, so the next
// write's entries would wait behind the barrier's, a round trip to a
// follower one region away. A newer commit interrupts the wait: its own
// notices, or the entries after it, cover the older one.
//
// A barrier, where one is needed, costs one more log entry — an fsync on
// each member — per pause in the writes, not per write. The delay is what
// keeps it so: under load the group commit empties the log's tail at
// every batch, and the next batch, a client round trip later, carries the
// news instead; without the delay every batch would be nudged.

// nudgeDelay is how long after a commit the leader waits for an entry
// that would carry the news before it appends a barrier. It waits only
// while commits come close together (within sparseGap of each other):
// after a lone write nothing is coming, and the delay would only add to
// the followers' lag.
const (
	nudgeDelay = time.Millisecond
	sparseGap  = 5 * time.Millisecond
)

// nudgeTimeout bounds how long a nudge may wait to be enqueued; a leader
// that busy has entries flowing, which carry the commit index anyway.
const nudgeTimeout = 100 * time.Millisecond

// noticeWait is how long the nudger waits for every member to accept a
// commit's notices before it appends the barrier: longer than any round
// trip between regions. A member that has not answered by then (cut off,
// or its connection failed with the notice in flight) is sent the
// barrier, as one that refused the notice is at once.
const noticeWait = time.Second

// nudgingFSM is the FSM as raft drives it: on the leader, before it
// applies a batch holding a command, it starts the commit notices of a
// lone commit itself (Node.noticeLoneCommit) and signals the nudger, so
// that the notices leave as soon as raft hands the committed entries to
// the FSM — while the leader applies them, not once the nudger's
// goroutine, and then the proposer, have been woken — and the barrier
// follows. On a follower it hands lone commits to the relayed commit
// notices (Node.relayApplied) before applying them, for the same reason.
type nudgingFSM struct {
	*fsm.FSM
	nudges chan struct{} // the Node's
	// raft is set once raft.NewRaft returned; raft may apply before.
	raft atomic.Pointer[raft.Raft]
	// node is set once the Node exists (after raft.NewRaft): until then
	// only the nudger tells followers of commits.
	node atomic.Pointer[Node]
	// lastCommand is when ApplyBatch last saw a command (zero for
	// never). Only raft's FSM goroutine touches it.
	lastCommand time.Time
}

// Apply applies one entry (raft calls ApplyBatch; see fsm.FSM.Apply).
func (f *nudgingFSM) Apply(l *raft.Log) any { return f.ApplyBatch([]*raft.Log{l})[0] }

// ApplyBatch, when this member leads and logs hold a command, starts the
// commit notices of a lone commit (one not within sparseGap of the
// previous) and signals the nudger; when it follows, it hands a lone
// commit to the relays (relay.go). Then it applies logs. raft hands the
// FSM committed entries only, so the last of logs is committed.
func (f *nudgingFSM) ApplyBatch(logs []*raft.Log) []any {
	r := f.raft.Load()
	if r == nil || !slices.ContainsFunc(logs, isCommand) {
		return f.FSM.ApplyBatch(logs)
	}
	now := time.Now()
	lone := !closeTogether(f.lastCommand, now)
	f.lastCommand = now
	n := f.node.Load()
	switch r.State() {
	case raft.Leader:
		if n != nil && lone {
			n.noticeLoneCommit(logs[len(logs)-1].Index)
		}
		signal(f.nudges)
	case raft.Follower:
		if n != nil && lone {
			n.relayApplied(logs)
		}
	}
	return f.FSM.ApplyBatch(logs)
}

// noticeLoneCommit starts the commit notices for commit, committed and
// just handed to the leader's FSM, when no entry follows it in the log:
// what the nudger would send for it next without a delay (needsNudge,
// closeTogether), sent without waiting for the nudger's goroutine, unless
// they started at the acknowledgement that made it one (acknotice.go). An
// entry that follows carries the news itself, and is noticed once
// committed. The notices only start here (noticer.notify never blocks on
// the network); the nudger's own notify for the same commit then sends
// nothing more.
func (n *Node) noticeLoneCommit(commit uint64) {
	if n.raft.LastIndex() > commit {
		return
	}
	n.notices.notify(n.raft.CurrentTerm(), commit)
}

func isCommand(l *raft.Log) bool { return l.Type == raft.LogCommand }

// signalNudge tells the nudger that entries were committed (nudgingFSM
// does for commands; the leader's barrier of its term calls it).
func (n *Node) signalNudge() { signal(n.nudges) }

// signal signals the nudger on nudges. It never blocks: signals that
// arrive while one is pending are the same news.
func signal(nudges chan struct{}) {
	select {
	case nudges <- struct{}{}:
	default:
	}
}

// closeTogether reports whether a commit signalled at now came within
// sparseGap of the previous one, signalled at prev (zero for none): then
// the nudger waits nudgeDelay for an entry that would carry the news.
func closeTogether(prev, now time.Time) bool { return now.Sub(prev) <= sparseGap }

// nudgeState is what the nudger reads of raft after a commit.
type nudgeState struct {
	leader bool
	// commit is the commit index, last the last index of the log (read
	// after commit, so an entry appended meanwhile counts as following).
	commit, last uint64
	// covered is what the previous nudges covered (coveredBy): followers
	// know of every commit up to it.
	covered uint64
	// members is the number of members of the configuration.
	members int
}

// needsNudge reports whether the leader must append a barrier for its
// followers to learn of its commit index now: it leads a group with other
// members, entries were committed that no earlier nudge covered, and no
// entry follows the commit index (one that does carries the news when it
// is sent, and is nudged itself once committed).
func (s nudgeState) needsNudge() bool {
	return s.leader && s.members >= 2 && s.commit > s.covered && s.last <= s.commit
}

// coveredBy returns the index up to which followers know of the leader's
// commits once a nudge appended at index barrier, the commit index being
// commit when it was appended, has committed. When the barrier directly
// follows commit, that is the barrier itself (its AppendEntries carries
// commit, and nobody waits for a barrier's own commit). When other entries
// came between, they committed with the barrier after its AppendEntries
// left, so followers know only of commit.
func coveredBy(commit, barrier uint64) uint64 {
	if barrier == commit+1 {
		return barrier
	}
	return commit
}

// nudgeFollowers runs until ctx ends: for each signal, after nudgeDelay
// when commits come close together, if needsNudge it sends the commit
// notices and waits for every member's answer (awaitAccepted), and unless
// all accepted it appends a barrier and waits for it to commit or for
// ctx to end. It does not wait for the barrier alone: raft never answers
// a future still queued when it shuts down, and Shutdown waits for the
// nudger.
func (n *Node) nudgeFollowers(ctx context.Context) {
	var covered uint64 // see nudgeState.covered
	var last time.Time // of the previous signal
	delay := time.NewTimer(0)
	<-delay.C
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.nudges:
		}
		now := time.Now()
		delayed := closeTogether(last, now)
		last = now
		if delayed {
			delay.Reset(nudgeDelay)
			select {
			case <-ctx.Done():
				return
			case <-delay.C:
			}
		}
		term := n.raft.CurrentTerm()
		others, read := n.otherMembers()
		st := nudgeState{commit: n.raft.CommitIndex(), covered: covered}
		st.leader, st.last = n.IsLeader(), n.raft.LastIndex()
		if read {
			st.members = len(others) + 1
		}
		if !st.needsNudge() {
			continue
		}
		// Followers learn of the commit from the notice (notice.go),
		// without a log write; the barrier tells those that could not
		// accept it.
		n.notices.notify(term, st.commit)
		switch n.notices.awaitAccepted(ctx, term, st.commit, others, noticeWait, n.nudges) {
		case noticesAccepted:
			covered = st.commit
			continue
		case noticesInterrupted:
			// A newer commit: its turn now (the signal was taken). Its
			// notices, or the entries after it, cover this one.
			signal(n.nudges)
			continue
		}
		// The wait keeps one nudge in flight; a failure (leadership lost,
		// shutdown) needs nothing: the next leader's own entries carry its
		// commit index.
		f := n.raft.Barrier(nudgeTimeout)
		if err := wait(ctx, f); err != nil {
			continue
		}
		if f, ok := f.(raft.IndexFuture); ok {
			covered = coveredBy(st.commit, f.Index())
		}
		n.metrics.nudges.Inc()
	}
}

// otherMembers returns the members of the latest raft configuration but
// this node, and whether it could be read.
func (n *Node) otherMembers() ([]raft.ServerID, bool) {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return nil, false
	}
	var ids []raft.ServerID
	for _, s := range f.Configuration().Servers {
		if string(s.ID) != n.id {
			ids = append(ids, s.ID)
		}
	}
	return ids, true
}
