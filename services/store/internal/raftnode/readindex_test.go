package raftnode

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestReadIndex: the leader's read index covers every write acknowledged
// before the call, after a barrier of its own term; a follower that waits
// for that index locally reflects the write; followers do not answer read
// indexes themselves.
func TestReadIndex(t *testing.T) {
	ms := cluster(t, 3, nil)
	leader, followers := leaderOf(t, ms)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	rev, index := leader.put(ctx, "ri", "v")
	ri, err := leader.node.ReadIndex(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ri < index {
		t.Fatalf("read index %d is below the acknowledged write's index %d", ri, index)
	}
	if got, term := leader.node.barrierTerm.Load(), leader.node.Term(); got != term {
		t.Fatalf("leader's barrier term %d, current term %d: no barrier of its own term before the read index", got, term)
	}
	if err := leader.node.LinearizableBarrier(ctx); err != nil {
		t.Fatal(err)
	}
	if kv := leader.get("ri"); kv.GetModRevision() != rev {
		t.Fatalf("leader after its barrier: %v, want revision %d", kv, rev)
	}

	for _, f := range followers {
		for name, call := range map[string]func() error{
			"ReadIndex":           func() error { _, err := f.node.ReadIndex(ctx); return err },
			"LinearizableBarrier": func() error { return f.node.LinearizableBarrier(ctx) },
		} {
			if err := call(); !errors.Is(err, ErrNotLeader) || !errors.Is(err, ErrNotProposed) {
				t.Errorf("%s on follower %s: %v, want ErrNotLeader and ErrNotProposed", name, f.cfg.ID, err)
			}
		}
		if err := f.node.WaitIndex(ctx, ri); err != nil {
			t.Fatalf("WaitIndex(%d) on %s: %v", ri, f.cfg.ID, err)
		}
		if kv := f.get("ri"); kv.GetModRevision() != rev {
			t.Fatalf("follower %s after WaitIndex(%d): %v, want revision %d", f.cfg.ID, ri, kv, rev)
		}
	}
}

// TestWaitForAnEntryTheFSMNeverSees: no-op and barrier entries never reach
// the FSM, so waiting for their index waits for the last entry below them
// that does, and returns.
func TestWaitForAnEntryTheFSMNeverSees(t *testing.T) {
	m := single(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, index := m.put(ctx, "k", "v")
	f := m.node.raft.Barrier(time.Second)
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	barrier := f.(raft.IndexFuture).Index()
	if typ := m.entryType(barrier); typ != raft.LogBarrier || barrier <= index {
		t.Fatalf("entry %d is a %v, want a barrier after the write at %d", barrier, typ, index)
	}
	if err := m.node.waitApplied(ctx, barrier); err != nil {
		t.Fatalf("waiting for the barrier at %d (the FSM applied %d): %v", barrier, m.fsm.AppliedIndex(), err)
	}
	if err := m.node.WaitIndex(ctx, barrier); err != nil {
		t.Fatalf("WaitIndex(%d): %v", barrier, err)
	}
}

// TestReadIndexNeedsAQuorum: a leader cut off from its followers stops
// handing out read indexes and answers ErrNotLeader. (A heartbeat answer
// already on its way when they stopped may confirm one more round.)
func TestReadIndexNeedsAQuorum(t *testing.T) {
	ms := cluster(t, 3, nil)
	leader, followers := leaderOf(t, ms)
	for _, f := range followers {
		f.stop()
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		_, err := leader.node.ReadIndex(ctx)
		if err == nil {
			select {
			case <-ctx.Done():
				t.Fatal("a leader without its followers still hands out read indexes after 30s")
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		if !errors.Is(err, ErrNotLeader) {
			t.Fatalf("ReadIndex without a quorum: %v, want ErrNotLeader", err)
		}
		return
	}
}
