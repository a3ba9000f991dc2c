package raftnode

import (
	"context"
	"time"
)

// ReadIndex returns an index such that a read served once the FSM applied
// up to it reflects every write acknowledged before the call: on the
// leader, it applies a barrier once per term (so the commit index covers
// earlier leaders' entries), captures the commit index, then confirms
// leadership with a heartbeat round that started after the capture.
// Followers get ErrNotLeader (wrapping ErrNotProposed).
func (n *Node) ReadIndex(ctx context.Context) (uint64, error) {
	if !n.IsLeader() {
		return 0, notLeader()
	}
	if err := n.leaderBarrier(ctx); err != nil {
		return 0, err
	}
	index := n.raft.CommitIndex()
	if err := n.verifyLeader(ctx); err != nil {
		return 0, err
	}
	return index, nil
}

// WaitIndex waits until this member's FSM reflects every entry up to index
// (an index from the leader's ReadIndex): first until raft has committed
// and handed entries up to index to the FSM locally, then until the FSM
// applied the last of them that it will see.
func (n *Node) WaitIndex(ctx context.Context, index uint64) error {
	backoff := 100 * time.Microsecond
	for n.raft.AppliedIndex() < index {
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Millisecond)
	}
	return n.waitApplied(ctx, index)
}

// verifyLeader confirms leadership. Concurrent callers share heartbeat
// rounds: a caller joins the queue, and the next round (which starts after
// it joined, so after it captured its commit index) answers everyone queued
// before it started. One round is in flight at a time.
func (n *Node) verifyLeader(ctx context.Context) error {
	ch := make(chan error, 1)
	n.vmu.Lock()
	n.vwaiting = append(n.vwaiting, ch)
	if !n.vrunning {
		n.vrunning = true
		go n.verifyRounds()
	}
	n.vmu.Unlock()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// verifyRounds runs heartbeat rounds while callers are queued. It ends when
// the queue is empty; each round ends when raft answers (at the latest when
// it shuts down).
func (n *Node) verifyRounds() {
	for {
		n.vmu.Lock()
		batch := n.vwaiting
		n.vwaiting = nil
		if len(batch) == 0 {
			n.vrunning = false
			n.vmu.Unlock()
			return
		}
		n.vmu.Unlock()
		err := n.raft.VerifyLeader().Error()
		if err != nil {
			err = mapErr(err)
		}
		for _, ch := range batch {
			ch <- err
		}
	}
}

// Lag returns how many log entries this member's raft applied index
// trails leaderCommit (an index from the leader's ReadIndex), 0 when it
// does not. Raft's applied index counts every entry handed to the FSM,
// no-ops and barriers included, so a member that has caught up has lag 0
// even when the newest entries never reach the FSM.
func (n *Node) Lag(leaderCommit uint64) uint64 {
	if applied := n.raft.AppliedIndex(); applied < leaderCommit {
		return leaderCommit - applied
	}
	return 0
}
