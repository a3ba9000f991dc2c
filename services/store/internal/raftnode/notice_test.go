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

// TestFarFollower: a non-voter behind a link of 100 ms each way learns of
// commits from the leader's commit notices (notice.go), for lone writes
// and for a stream of writes closer together than the round trip.
func TestFarFollower(t *testing.T) {
	const linkDelay = 100 * time.Millisecond
	ctx, leader, follower := farFollower(t, linkDelay)
	t.Run("lone writes apply from the notice", func(t *testing.T) {
		loneWritesApplyFromTheNotice(ctx, t, leader, follower, linkDelay)
	})
	t.Run("a stream of writes is noticed", func(t *testing.T) {
		streamOfWritesIsNoticed(ctx, t, leader, follower, linkDelay)
	})
}

// loneWritesApplyFromTheNotice: raft sends the far follower one
// AppendEntries at a time, and raft's own AppendEntries carrying the commit
// index would come after CommitTimeout (a minute here); heartbeats carry
// none. The leader's commit notice, sent at the commit on another
// connection, arrives half a round trip after the commit: the follower
// applies the write then, while its log still ends with it. As it accepts
// the notice, no barrier follows the write (nudge.go).
func loneWritesApplyFromTheNotice(ctx context.Context, t *testing.T, leader, follower *member, linkDelay time.Duration) {
	early := 0
	for i := range 3 {
		// Let the replication to the follower go idle, so that the
		// write's AppendEntries leaves at once.
		time.Sleep(2 * linkDelay)
		key := fmt.Sprintf("far/%d", i)
		rev, index := leader.put(ctx, key, "v")
		for {
			last, err := follower.node.logs.LastIndex()
			if err != nil {
				t.Fatal(err)
			}
			if follower.fsm.AppliedIndex() >= index {
				if last == index {
					early++
				}
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("write %d (index %d): the far follower did not apply it", i, index)
			}
			time.Sleep(time.Millisecond)
		}
		if kv := follower.get(key); kv.GetModRevision() != rev {
			t.Fatalf("far follower has %s at revision %d, want %d", key, kv.GetModRevision(), rev)
		}
	}
	if early == 0 {
		t.Fatal("the far follower applied none of 3 lone writes while its log ended with the write: it learned each commit from a later entry, not from a commit notice")
	}
	t.Logf("%d of 3 lone writes applied by the far follower while its log ended with the write", early)
}

// streamOfWritesIsNoticed: writes a third of the round trip apart to the
// far follower. raft's AppendEntries
// to it is always in flight and carries the writes made before it left;
// each write's commit notice carries the entries after those, goes out
// on the notice pipeline without waiting for the answers to earlier ones,
// and the member accepts it (it has what the request in flight carried by
// then). Counted by the leader's meridian_store_raft_commit_notices_total:
// most of the writes. Notices without entries would be refused (the
// member lacks the entry), and notices one at a time would go once per
// round trip (a third of them).
func streamOfWritesIsNoticed(ctx context.Context, t *testing.T, leader, follower *member, linkDelay time.Duration) {
	const writes = 12
	before := testutil.ToFloat64(leader.node.metrics.notices)
	var last uint64
	for i := range writes {
		_, last = leader.put(ctx, fmt.Sprintf("stream/%d", i), "v")
		time.Sleep(2 * linkDelay / 3)
	}
	if err := follower.fsm.WaitApplied(ctx, last); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * linkDelay) // the last answers
	accepted := testutil.ToFloat64(leader.node.metrics.notices) - before
	if accepted < writes/2 {
		t.Fatalf("the far follower accepted %v commit notices for %d writes %s apart over a %s round trip, want at least %d", accepted, writes, 2*linkDelay/3, 2*linkDelay, writes/2)
	}
	t.Logf("%v of %d writes' commit notices accepted", accepted, writes)
}

// farFollower starts two voters on loopback and, as a non-voter, a
// member behind a link of linkDelay each way (commit timeouts of a
// minute), and returns the leader and that member once it caught up, with
// a context that ends a minute after the call (or with the test), for the
// test to run in.
func farFollower(t *testing.T, linkDelay time.Duration) (ctx context.Context, leader, far *member) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	ms := cluster(t, 2, func(c *Config) { c.CommitTimeout = time.Minute })
	leader, _ = leaderOf(t, ms)
	addrs := daemontest.FreeAddrs(t, 2)
	direct, proxied := addrs[0], addrs[1]
	netdelay.Start(t, proxied, direct, linkDelay)
	cfg := Config{ID: "far", PeerAddress: direct, PeerAdvertise: proxied, CommitTimeout: time.Minute}
	fastTimeouts(&cfg)
	far = newMember(t, cfg)
	if err := leader.node.AddMember(ctx, "far", proxied, "", true); err != nil {
		t.Fatal(err)
	}
	ri, err := leader.node.ReadIndex(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := far.node.WaitIndex(ctx, ri); err != nil {
		t.Fatal(err)
	}
	return ctx, leader, far
}

// TestNearFollowerNoticed: a follower beside the leader, whose
// replication is idle once it has acknowledged a lone write, is told of
// the write's commit by a commit notice, which it accepts without writing
// its log, rather than only by the nudge's barrier, which it applies after
// the leader's log write and its own. Counted by the leader's
// meridian_store_raft_commit_notices_total: one per lone write.
func TestNearFollowerNoticed(t *testing.T) {
	const writes = 5
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	ms := cluster(t, 2, func(c *Config) { c.CommitTimeout = time.Minute })
	leader, followers := leaderOf(t, ms)
	follower := followers[0]
	before := testutil.ToFloat64(leader.node.metrics.notices)
	for i := range writes {
		time.Sleep(20 * time.Millisecond) // a lone write: the previous nudge is done
		key := fmt.Sprintf("near/%d", i)
		rev, index := leader.put(ctx, key, "v")
		if err := follower.fsm.WaitApplied(ctx, index); err != nil {
			t.Fatalf("write %d (index %d): %v", i, index, err)
		}
		if kv := follower.get(key); kv.GetModRevision() != rev {
			t.Fatalf("follower has %s at revision %d, want %d", key, kv.GetModRevision(), rev)
		}
	}
	for testutil.ToFloat64(leader.node.metrics.notices)-before < writes {
		if ctx.Err() != nil {
			t.Fatalf("the follower accepted %v commit notices for %d lone writes, want %d", testutil.ToFloat64(leader.node.metrics.notices)-before, writes, writes)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLacksNoticedEntry: a notice without entries is sent again, with
// them, only when the follower refused it for lacking the entry it
// starts from, in the notice's term.
func TestLacksNoticedEntry(t *testing.T) {
	bare := &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 10, PrevLogTerm: 3, LeaderCommitIndex: 10}
	carrying := &raft.AppendEntriesRequest{Term: 3, PrevLogEntry: 9, PrevLogTerm: 3, LeaderCommitIndex: 10, Entries: []*raft.Log{{Index: 10, Term: 3}}}
	for _, tc := range []struct {
		name string
		req  *raft.AppendEntriesRequest
		resp raft.AppendEntriesResponse
		want bool
	}{
		{"accepted", bare, raft.AppendEntriesResponse{Term: 3, LastLog: 10, Success: true}, false},
		{"the follower lacks the entry", bare, raft.AppendEntriesResponse{Term: 3, LastLog: 9}, true},
		{"the notice carried entries", carrying, raft.AppendEntriesResponse{Term: 3, LastLog: 8}, false},
		{"a newer term", bare, raft.AppendEntriesResponse{Term: 4, LastLog: 9}, false},
		{"the follower has the index with another term", bare, raft.AppendEntriesResponse{Term: 3, LastLog: 10}, false},
		{"an empty log", bare, raft.AppendEntriesResponse{Term: 3, LastLog: 0}, false},
	} {
		if got := lacksNoticedEntry(tc.req, &tc.resp); got != tc.want {
			t.Errorf("%s: lacksNoticedEntry = %v, want %v", tc.name, got, tc.want)
		}
	}
}
