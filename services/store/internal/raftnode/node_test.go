package raftnode

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
)

// TestStartFailureReleasesWhatItOpened: a Start that fails at a late step
// (raft's configuration, after the log and the transport are open) leaves
// nothing open: the peer port is free, and the same directories start.
func TestStartFailureReleasesWhatItOpened(t *testing.T) {
	addr := daemontest.FreeAddrs(t, 1)[0]
	cfg := Config{ID: "s0", PeerAddress: addr, Bootstrap: true,
		HeartbeatTimeout: time.Second, ElectionTimeout: time.Second / 2} // raft refuses an election timeout below the heartbeat's
	m := &member{t: t, cfg: cfg, dir: t.TempDir()}
	t.Cleanup(m.stop)
	if err := m.open(); err == nil || !strings.Contains(err.Error(), "ElectionTimeout") {
		t.Fatalf("Start with an election timeout below the heartbeat timeout: %v", err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the failed Start left its peer port %s open: %v", addr, err)
	}
	l.Close()
	m.cfg.ElectionTimeout = time.Second
	m.start()
	m.ready()
	if !m.node.IsLeader() {
		t.Fatal("the member did not start on the same directories")
	}
}

// TestStartBootstrapsTheInitialCluster: every member of a new cluster is
// started with the same InitialCluster; the configuration holds them all
// as voters, each a fresh start, and a restart finds the state.
func TestStartBootstrapsTheInitialCluster(t *testing.T) {
	ms := cluster(t, 3, nil)
	leader, _ := leaderOf(t, ms)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	members, err := leader.node.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, m := range ms {
		want[m.cfg.ID] = m.cfg.PeerAddress
		if !m.node.Fresh() {
			t.Errorf("%s: not fresh on its first start", m.cfg.ID)
		}
	}
	if len(members) != len(want) {
		t.Fatalf("members %v, want %v", members, want)
	}
	for _, mb := range members {
		if want[mb.GetId()] != mb.GetPeerAddress() || !mb.GetVoter() || mb.GetLeader() != (mb.GetId() == leader.cfg.ID) {
			t.Errorf("member %v, want a voter at %s (leader %s)", mb, want[mb.GetId()], leader.cfg.ID)
		}
	}
	if id := MemberID(leader.cfg.ID); id != leader.node.MemberID() || id == MemberID("other") {
		t.Errorf("MemberID(%q) = %d, node's %d", leader.cfg.ID, id, leader.node.MemberID())
	}

	rev, _ := leader.put(ctx, "k", "v")
	f := ms[0]
	if f == leader {
		f = ms[1]
	}
	f.stop()
	f.start()
	f.ready()
	if f.node.Fresh() {
		t.Fatalf("%s is fresh after a restart", f.cfg.ID)
	}
	if err := f.node.WaitIndex(ctx, mustReadIndex(t, ctx, ms)); err != nil {
		t.Fatal(err)
	}
	if kv := f.get("k"); kv.GetModRevision() != rev {
		t.Fatalf("%s after a restart: %v, want revision %d", f.cfg.ID, kv, rev)
	}
}

// mustReadIndex returns a read index from whichever member leads.
func mustReadIndex(t *testing.T, ctx context.Context, ms []*member) uint64 {
	t.Helper()
	leader, _ := leaderOf(t, ms)
	ri, err := leader.node.ReadIndex(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ri
}
