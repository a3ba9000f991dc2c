package raftnode

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	"github.com/meridian-cp/meridian/lib/netdelay"
)

// TestFarVoterAppliesBeforeTheLeaderHears: five voters, two beside each
// other (the leader and a near follower) and three each behind a link of
// 100 ms each way, as in a 2+2+1 spread over three regions. A write commits
// once a far voter holds it, which the leader hears a round trip after it
// wrote it; the near follower's notice tells the far voters half a round
// trip after, and they apply it then, while the leader's commit index is
// still below it. Without follower notices a member can only learn of a
// commit from the leader, after the leader. One write of three doing it is
// enough on a loaded machine (the margin is half a round trip).
func TestFarVoterAppliesBeforeTheLeaderHears(t *testing.T) {
	const linkDelay = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ms := cluster(t, 2, func(c *Config) { c.CommitTimeout = time.Minute })
	leader, followers := leaderOf(t, ms)
	near := followers[0]
	var far []*member
	for i := range 3 {
		addrs := daemontest.FreeAddrs(t, 2)
		direct, proxied := addrs[0], addrs[1]
		netdelay.Start(t, proxied, direct, linkDelay)
		id := fmt.Sprintf("far%d", i)
		cfg := Config{ID: id, PeerAddress: direct, PeerAdvertise: proxied, CommitTimeout: time.Minute}
		fastTimeouts(&cfg)
		cfg.HeartbeatTimeout, cfg.ElectionTimeout = 5*time.Second, 5*time.Second // a round trip is 200 ms
		m := newMember(t, cfg)
		if err := leader.node.AddMember(ctx, id, proxied, "", false); err != nil {
			t.Fatal(err)
		}
		far = append(far, m)
	}
	// A write after the joins: its commit notices tell the far voters
	// (configuration entries reach no FSM, so nothing nudges for them).
	_, joined := leader.put(ctx, "joined", "v")
	for _, m := range far {
		if err := m.fsm.WaitApplied(ctx, joined); err != nil {
			t.Fatal(err)
		}
	}
	if !leader.node.IsLeader() {
		t.Fatal("leadership moved while the far voters joined")
	}
	before := testutil.ToFloat64(near.node.metrics.followerNotices)

	early := 0
	for i := range 3 {
		time.Sleep(2 * linkDelay) // a lone write: the previous one's traffic is done
		want := leader.node.raft.LastIndex() + 1
		key := fmt.Sprintf("vote/%d", i)
		done := make(chan uint64, 1)
		go func() {
			_, index := leader.put(ctx, key, "v")
			done <- index
		}()
		for seen := false; !seen; {
			leaderCommit := leader.node.raft.CommitIndex()
			for _, m := range far {
				seen = seen || m.fsm.AppliedIndex() >= want
			}
			if seen && leaderCommit < want {
				early++
			}
			if ctx.Err() != nil {
				t.Fatalf("write %d (index %d): no far voter applied it", i, want)
			}
			time.Sleep(time.Millisecond)
		}
		if index := <-done; index != want {
			t.Fatalf("write %d went to index %d, want %d (another entry came between)", i, index, want)
		}
	}
	if early == 0 {
		t.Fatal("no far voter applied any of 3 lone writes before the leader's commit index reached it: they learned of each commit from the leader, not from the near follower's notice")
	}
	if got := testutil.ToFloat64(near.node.metrics.followerNotices) - before; got == 0 {
		t.Fatal("the far voters accepted no follower notice from the near follower")
	}
	t.Logf("%d of 3 lone writes applied by a far voter before the leader knew they were committed", early)
}

// TestNoticeCommits: a follower tells a voter whose copy, with the
// leader's and its own, makes a majority that the leader's and its own do
// not; only voters count, and only voters send.
func TestNoticeCommits(t *testing.T) {
	for _, tc := range []struct {
		name             string
		conf             raft.Configuration
		leader, self, to raft.ServerID
		want             bool
	}{
		{"three voters: the leader hears first", testConf(3, 1), "v0", "v1", "v2", false},
		{"three voters, to a non-voter", testConf(3, 1), "v0", "v1", "n0", false},
		{"four voters, to a voter", testConf(4, 0), "v0", "v1", "v2", true},
		{"five voters, to a voter", testConf(5, 1), "v0", "v1", "v2", true},
		{"five voters, to a non-voter", testConf(5, 1), "v0", "v1", "n0", false},
		{"five voters, from a non-voter", testConf(5, 1), "v0", "n0", "v1", false},
		{"seven voters", testConf(7, 0), "v0", "v1", "v2", false},
		{"three voters, leader not a voter", testConf(3, 1), "n0", "v1", "v2", true},
		{"five voters, leader not a voter", testConf(5, 1), "n0", "v1", "v2", false},
	} {
		if got := noticeCommits(tc.conf, tc.leader, tc.self, tc.to); got != tc.want {
			t.Errorf("%s: noticeCommits = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// testConf is a configuration of voters v0, v1, … and non-voters n0, n1, ….
func testConf(voters, nonVoters int) raft.Configuration {
	var c raft.Configuration
	for i := range voters {
		c.Servers = append(c.Servers, raft.Server{ID: raft.ServerID(fmt.Sprintf("v%d", i)), Suffrage: raft.Voter})
	}
	for i := range nonVoters {
		c.Servers = append(c.Servers, raft.Server{ID: raft.ServerID(fmt.Sprintf("n%d", i)), Suffrage: raft.Nonvoter})
	}
	return c
}
