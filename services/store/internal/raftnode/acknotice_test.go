package raftnode

import (
	"context"
	"testing"
	"time"
)

// TestCommitNoticedAtTheAcknowledgement: a far non-voter learns of a lone
// write's commit while the leader's state machine is stalled, so that raft
// never hands the write to it: the leader's notices leave at the
// follower's acknowledgement that makes the write committed
// (acknotice.go), not when its FSM applies the write. Nothing else tells
// the far member: raft's own AppendEntries carrying the commit index
// would come after CommitTimeout (a minute), two voters send no follower
// notices, and the nudger is woken by the FSM.
func TestCommitNoticedAtTheAcknowledgement(t *testing.T) {
	const linkDelay = 50 * time.Millisecond
	ctx, leader, far := farFollower(t, linkDelay)
	leader.put(ctx, "before", "v")

	// Stall the leader's FSM: the next write's publication holds it.
	time.Sleep(2 * linkDelay)
	leader.stall.Lock()
	stalled := true
	defer func() {
		if stalled {
			leader.stall.Unlock()
		}
	}()
	puts := make(chan error, 2)
	put := func(key string) uint64 {
		before := leader.node.raft.LastIndex()
		go func() {
			_, err := leader.node.Txn(ctx, putReq(key, "v"))
			puts <- err
		}()
		for leader.node.raft.LastIndex() == before {
			if ctx.Err() != nil {
				t.Fatalf("the leader did not append %s", key)
			}
			time.Sleep(time.Millisecond)
		}
		return leader.node.raft.LastIndex()
	}
	first := put("stalls")
	if err := far.fsm.WaitApplied(ctx, first); err != nil {
		t.Fatalf("the far member did not apply the write that stalls the leader's FSM: %v", err)
	}

	// The FSM is stuck in the first write's publication: the second is
	// committed by raft, never applied by the leader.
	time.Sleep(2 * linkDelay)
	second := put("noticed")
	waitCtx, waitCancel := context.WithTimeout(ctx, 10*time.Second)
	defer waitCancel()
	if err := far.fsm.WaitApplied(waitCtx, second); err != nil {
		t.Fatalf("the far member did not learn of the commit of index %d while the leader's FSM was stalled at %d: %v", second, leader.fsm.AppliedIndex(), err)
	}
	if applied := leader.fsm.AppliedIndex(); applied >= second {
		t.Fatalf("the leader's FSM applied index %d while stalled", applied)
	}
	if kv := far.get("noticed"); kv == nil {
		t.Fatal("the far member applied the write's index but does not hold its key")
	}

	leader.stall.Unlock()
	stalled = false
	for range 2 {
		if err := <-puts; err != nil {
			t.Fatalf("a write made while the leader's FSM was stalled: %v", err)
		}
	}
}
