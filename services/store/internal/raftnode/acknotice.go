package raftnode

import (
	"runtime"

	"github.com/hashicorp/raft"
)

// Commit notices at the acknowledgement: the leader tells the other
// members of a lone commit as soon as the answer that makes it one
// arrives, before raft itself has counted that answer.
//
// The leader's commit notices (notice.go) start when raft hands the
// committed entry to the state machine (nudgingFSM.ApplyBatch). By then
// the answer that completed the majority has been read by raft's
// replication goroutine for that follower, counted by raft's main
// goroutine, and the entry handed to the FSM goroutine, which starts the
// senders: three goroutines woken in turn, each waiting for a processor
// while the others run the write's own answer. A member one region away
// learns of the commit that much later than it could.
//
// trackedTransport sees each answer first, on the replication goroutine
// that sent the AppendEntries, before raft does. So when the leader has
// appended a lone command (the last entry of its log, stored more than
// sparseGap after the previous command: noticingLogStore) and an answer
// accepting it arrives, the node counts the copies itself, as raft is
// about to: the leader's own (raft's leader writes its log before it
// replicates) and those of the voters that accepted, in this term, an
// AppendEntries carrying the entry (trackedTransport.ackedInTerm). An
// entry of the current term stored on a majority of the voters of the
// latest configuration is committed (the Raft paper, §5.4.2; raft counts
// by the latest configuration too), whoever has counted it. Then the
// notices start at once, and the replication goroutine yields its
// processor to their senders before it returns the answer to raft: the
// notices leave a goroutine switch after the answer came, and raft's own
// commit waits for their writes (tens of microseconds), not the other way
// round. The count is raft's own, from the same answers of the same term,
// made a moment sooner; where it falls short (an answer raft counted and
// this node did not see), the notices start from the FSM as before.
//
// The FSM's start of the same commit's notices then finds them sent
// (noticer.notify skips a commit already wanted), and the nudger waits
// for their answers as before.

// appendedLone records, on the leader, that logs (just stored, holding a
// command more than sparseGap after the previous one) end with a lone
// command: its commit is noticed at the acknowledgement that makes it one.
// It runs on raft's main goroutine.
func (n *Node) appendedLone(logs []*raft.Log) {
	last := logs[len(logs)-1]
	n.lone.Store(&termIndex{term: last.Term, index: last.Index})
}

// noticeAcked runs on raft's replication goroutine when a follower has
// just accepted an AppendEntries of term carrying entries up to index.
// When that makes the lone command the leader appended last committed by
// the count above, it starts the commit notices and yields to them.
func (n *Node) noticeAcked(term, index uint64) {
	lone := n.lone.Load()
	if lone == nil || lone.term != term || index < lone.index {
		return
	}
	if n.raft.LastIndex() != lone.index || !n.committedByAcks(term, lone.index) {
		return // an entry follows (it carries the news), or no majority yet
	}
	if !n.lone.CompareAndSwap(lone, nil) {
		return // another follower's answer counted it first
	}
	n.notices.notify(term, lone.index)
	runtime.Gosched()
}

// committedByAcks reports whether the voters of the latest configuration
// that hold index of term, as far as this leader knows, are a majority:
// itself, if a voter, and each other voter that accepted an
// AppendEntries carrying index in term.
func (n *Node) committedByAcks(term, index uint64) bool {
	t, ok := n.trans.(*trackedTransport)
	if !ok {
		return false
	}
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	voters, copies := 0, 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		if string(s.ID) == n.id || t.ackedInTerm(s.ID, term) >= index {
			copies++
		}
	}
	return voters > 0 && 2*copies > voters
}
