package raftnode

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestCloseTogether: the nudger waits nudgeDelay for an entry that would
// carry the news only when a commit comes within sparseGap of the one
// before; the first commit, and one after a pause, are nudged at once.
func TestCloseTogether(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	for _, c := range []struct {
		name      string
		prev, now time.Time
		want      bool
	}{
		{"first commit", time.Time{}, t0, false},
		{"right after the previous", t0, t0.Add(time.Millisecond), true},
		{"at the gap", t0, t0.Add(sparseGap), true},
		{"just past the gap", t0, t0.Add(sparseGap + time.Microsecond), false},
		{"after a pause", t0, t0.Add(time.Second), false},
	} {
		if got := closeTogether(c.prev, c.now); got != c.want {
			t.Errorf("%s: closeTogether = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestNeedsNudge: the leader appends a barrier only when followers would
// otherwise not hear of its commit index: it leads a group with others,
// something committed since the last nudge, and no entry follows (that
// entry carries the news, and is nudged itself once committed).
func TestNeedsNudge(t *testing.T) {
	nudge := nudgeState{leader: true, commit: 10, last: 10, covered: 7, members: 3}
	for _, c := range []struct {
		name string
		edit func(*nudgeState)
		want bool
	}{
		{"lone commit on a leader of three", func(*nudgeState) {}, true},
		{"two members", func(s *nudgeState) { s.members = 2 }, true},
		{"not the leader", func(s *nudgeState) { s.leader = false }, false},
		{"alone in the group", func(s *nudgeState) { s.members = 1 }, false},
		{"configuration unreadable", func(s *nudgeState) { s.members = 0 }, false},
		{"an entry follows the commit", func(s *nudgeState) { s.last = 11 }, false},
		{"covered by the last nudge", func(s *nudgeState) { s.covered = 10 }, false},
		{"the last nudge is the commit itself", func(s *nudgeState) { s.covered, s.commit, s.last = 12, 12, 12 }, false},
		{"first commit, nothing nudged yet", func(s *nudgeState) { s.covered = 0 }, true},
	} {
		s := nudge
		c.edit(&s)
		if got := s.needsNudge(); got != c.want {
			t.Errorf("%s (%+v): needsNudge = %v, want %v", c.name, s, got, c.want)
		}
	}
}

// TestCoveredBy: a nudge tells followers of the commit index it was
// appended at; only when it directly follows that index does it cover
// itself. An entry appended between the check and the barrier commits
// with the barrier, unknown to followers, and must be nudged again.
func TestCoveredBy(t *testing.T) {
	for _, c := range []struct {
		name            string
		commit, barrier uint64
		want            uint64
	}{
		{"barrier right after the commit", 10, 11, 11},
		{"one entry between", 10, 12, 10},
		{"a batch between", 10, 40, 10},
	} {
		if got := coveredBy(c.commit, c.barrier); got != c.want {
			t.Errorf("%s: coveredBy(%d, %d) = %d, want %d", c.name, c.commit, c.barrier, got, c.want)
		}
	}
	// What follows a nudge that covered less: the entry's commit is news.
	s := nudgeState{leader: true, members: 3, covered: coveredBy(10, 12), commit: 12, last: 12}
	if !s.needsNudge() {
		t.Error("the entry committed with a barrier is not nudged")
	}
}

// TestLoneCommitIsNoticedWithoutABarrier: with CommitTimeout at a minute,
// a follower would learn that a lone write committed only a minute
// later. The leader's commit notices tell each follower at once, and as
// every follower accepts them, no barrier follows: the log holds the
// writes alone.
func TestLoneCommitIsNoticedWithoutABarrier(t *testing.T) {
	ctx, leader, followers := quietCluster(t)
	const writes = 4
	first := leader.node.raft.LastIndex() + 1
	accepted := testutil.ToFloat64(leader.node.metrics.notices)
	for i := range writes {
		key := fmt.Sprintf("lone/%d", i)
		rev, index := loneWrite(ctx, t, leader, followers, key)
		if kv := followers[0].get(key); kv.GetModRevision() != rev {
			t.Fatalf("follower %s has %s at revision %d, want %d", followers[0].cfg.ID, key, kv.GetModRevision(), rev)
		}
		// Both followers accepted its notice: the nudger has nothing
		// left to decide for this write.
		accepted += float64(len(followers))
		for testutil.ToFloat64(leader.node.metrics.notices) < accepted {
			if ctx.Err() != nil {
				for j := first; j <= leader.node.raft.LastIndex(); j++ {
					t.Logf("entry %d: %v", j, leader.entryType(j))
				}
				t.Fatalf("write %d (index %d): the followers accepted %v commit notices, want %v (nudges %v)", i, index, testutil.ToFloat64(leader.node.metrics.notices), accepted, testutil.ToFloat64(leader.node.metrics.nudges))
			}
			time.Sleep(time.Millisecond)
		}
	}
	time.Sleep(100 * time.Millisecond) // a barrier, if the nudger made one, is appended by now
	for i := first; i <= leader.node.raft.LastIndex(); i++ {
		if typ := leader.entryType(i); typ != raft.LogCommand {
			t.Errorf("entry %d after the first write is a %v: every member accepted every notice, so no barrier was needed", i, typ)
		}
	}
}

// TestBarrierForAMemberThatCannotBeNoticed: with a follower down, the
// notices to it cannot be sent, and the leader appends a barrier after
// each lone write, for that member to learn of the commit once it is
// back.
func TestBarrierForAMemberThatCannotBeNoticed(t *testing.T) {
	ctx, leader, followers := quietCluster(t)
	followers[1].stop()
	up := followers[:1]
	for i := range 3 {
		_, index := loneWrite(ctx, t, leader, up, fmt.Sprintf("down/%d", i))
		for deadline := time.Now().Add(20 * time.Second); ; {
			if last, err := leader.node.logs.LastIndex(); err == nil && last > index {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("write %d (index %d): no entry followed it on the leader within 20s", i, index)
			}
			time.Sleep(time.Millisecond)
		}
		if typ := leader.entryType(index + 1); typ != raft.LogBarrier {
			t.Fatalf("entry after write %d (index %d) is a %v, want the nudge's barrier", i, index, typ)
		}
	}
}

// quietCluster starts three members whose followers hear of commits from
// raft only after a minute (CommitTimeout), and returns the leader, its
// followers and a context for the test's writes.
func quietCluster(t *testing.T) (ctx context.Context, leader *member, followers []*member) {
	t.Helper()
	ms := cluster(t, 3, func(c *Config) {
		steadyLeader(c)
		c.CommitTimeout = time.Minute
	})
	leader, followers = leaderOf(t, ms)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx, leader, followers
}

// loneWrite puts key through leader once the previous write's traffic is
// done, and waits until each of followers applied it (within 20 s, far
// below a CommitTimeout of a minute).
func loneWrite(ctx context.Context, t *testing.T, leader *member, followers []*member, key string) (rev int64, index uint64) {
	t.Helper()
	time.Sleep(20 * time.Millisecond)
	rev, index = leader.put(ctx, key, "v")
	for _, f := range followers {
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
		err := f.fsm.WaitApplied(wctx, index)
		wcancel()
		if err != nil {
			t.Fatalf("%s (index %d): follower %s did not apply it within 20s (CommitTimeout is a minute): %v", key, index, f.cfg.ID, err)
		}
	}
	return rev, index
}

// steadyLeader gives a cluster timeouts that a loaded machine does not
// reach (the leader steps down after half the heartbeat timeout without
// a quorum's answer): tests of what a leader does over a stream of
// writes, not of elections.
func steadyLeader(c *Config) {
	c.HeartbeatTimeout, c.ElectionTimeout = 5*time.Second, 5*time.Second
}

// TestStreamOfCommitsIsNotNudgedPerCommit: writes that follow each other
// closely carry each other's commit index; the leader adds a barrier only
// where the stream pauses, never one per write.
func TestStreamOfCommitsIsNotNudgedPerCommit(t *testing.T) {
	ms := cluster(t, 3, steadyLeader)
	leader, _ := leaderOf(t, ms)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	first, _ := leader.node.logs.LastIndex()
	const writers, each = 8, 25
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if _, err := leader.node.Txn(ctx, putReq(fmt.Sprintf("stream/%d/%d", w, i), "v")); err != nil {
					t.Errorf("write %d/%d: %v", w, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	last := leader.fsm.AppliedIndex()
	commands, barriers := 0, 0
	for i := first + 1; i <= last; i++ {
		switch leader.entryType(i) {
		case raft.LogCommand:
			commands++
		case raft.LogBarrier:
			barriers++
		}
	}
	if commands != writers*each {
		t.Fatalf("%d commands in the log between %d and %d, want %d", commands, first+1, last, writers*each)
	}
	if 2*barriers >= commands {
		t.Fatalf("%d barriers among %d concurrent writes: nudged (nearly) per commit", barriers, commands)
	}
	t.Logf("%d barriers among %d writes", barriers, commands)
}
