package raftnode

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
)

// suffrage returns whether id is a member of the leader's configuration
// and whether it votes.
func (m *member) suffrage(ctx context.Context, id string) (member, voter bool) {
	m.t.Helper()
	ms, err := m.node.Members(ctx)
	if err != nil {
		m.t.Fatal(err)
	}
	for _, s := range ms {
		if s.GetId() == id {
			return true, s.GetVoter()
		}
	}
	return false, false
}

// clientAddress returns the client address m's state records for id.
func (m *member) clientAddress(id string) string {
	m.t.Helper()
	addrs, err := m.kv.Members()
	if err != nil {
		m.t.Fatal(err)
	}
	return addrs[id]
}

// TestLeaderOnlyOnAFollower: every call that only the leader serves is
// refused on a follower as not proposed, so the server may forward it.
func TestLeaderOnlyOnAFollower(t *testing.T) {
	ms := cluster(t, 3, nil)
	leader, followers := leaderOf(t, ms)
	f := followers[0].node
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for name, call := range map[string]func() error{
		"Txn":                 func() error { _, err := f.Txn(ctx, putReq("k", "v")); return err },
		"Compact":             func() error { _, err := f.Compact(ctx, 1); return err },
		"LeaseGrant":          func() error { _, err := f.LeaseGrant(ctx, 0, time.Hour); return err },
		"LeaseRevoke":         func() error { _, err := f.LeaseRevoke(ctx, 1); return err },
		"LeaseRenew":          func() error { _, err := f.LeaseRenew(ctx, 1); return err },
		"LeaseTimeToLive":     func() error { _, err := f.LeaseTimeToLive(ctx, 1, false); return err },
		"ReadIndex":           func() error { _, err := f.ReadIndex(ctx); return err },
		"AddMember":           func() error { return f.AddMember(ctx, "s9", "127.0.0.1:1", "", true) },
		"UpdateClientAddress": func() error { return f.UpdateClientAddress(ctx, leader.cfg.ID, "127.0.0.1:1") },
		"SetClientAddress":    func() error { return f.SetClientAddress(ctx, leader.cfg.ID, "127.0.0.1:1") },
		"PromoteMember":       func() error { return f.PromoteMember(ctx, leader.cfg.ID) },
		"RemoveMember":        func() error { return f.RemoveMember(ctx, leader.cfg.ID) },
		"TransferLeadership":  func() error { _, err := f.TransferLeadership(ctx, ""); return err },
	} {
		if err := call(); !errors.Is(err, ErrNotLeader) || !errors.Is(err, ErrNotProposed) {
			t.Errorf("%s on a follower: %v, want ErrNotLeader and ErrNotProposed", name, err)
		}
	}
	if !leader.node.IsLeader() || leader.clientAddress(leader.cfg.ID) != "" {
		t.Fatal("a refused call changed the cluster")
	}
}

// TestMembershipChanges: a new member is added as a non-voter with its
// client address recorded through the log, re-adding it with the same
// peer address only updates that address, a different peer address is
// refused, promotion makes it a voter, removal forgets it and its
// address, changes naming no member fail with ErrNoSuchMember, and
// leadership moves on request.
func TestMembershipChanges(t *testing.T) {
	ms := cluster(t, 3, nil)
	leader, _ := leaderOf(t, ms)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	cfg := Config{ID: "s3", PeerAddress: daemontest.FreeAddrs(t, 1)[0]}
	fastTimeouts(&cfg)
	joiner := newMember(t, cfg)
	if !joiner.node.Fresh() {
		t.Fatal("a member started on an empty directory is not fresh")
	}
	if err := leader.node.AddMember(ctx, "s3", cfg.PeerAddress, "client-s3", true); err != nil {
		t.Fatal(err)
	}
	if in, voter := leader.suffrage(ctx, "s3"); !in || voter {
		t.Fatalf("s3 after AddMember(non-voter): member %v voter %v", in, voter)
	}
	ri, err := leader.node.ReadIndex(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := joiner.node.WaitIndex(ctx, ri); err != nil {
		t.Fatal(err)
	}
	if got := joiner.clientAddress("s3"); got != "client-s3" {
		t.Fatalf("the new member's state records its client address as %q, want client-s3", got)
	}

	// Members re-register this way at start: the address changes, the
	// suffrage does not (nonVoter false here would otherwise promote).
	if err := leader.node.AddMember(ctx, "s3", cfg.PeerAddress, "client-s3b", false); err != nil {
		t.Fatal(err)
	}
	if in, voter := leader.suffrage(ctx, "s3"); !in || voter {
		t.Fatalf("s3 after re-adding: member %v voter %v, want a non-voter still", in, voter)
	}
	if got := leader.clientAddress("s3"); got != "client-s3b" {
		t.Fatalf("client address after re-adding: %q, want client-s3b", got)
	}
	err = leader.node.AddMember(ctx, "s3", "127.0.0.1:1", "", true)
	if err == nil || errors.Is(err, ErrNoSuchMember) || !strings.Contains(err.Error(), "remove it first") {
		t.Fatalf("AddMember of s3 at another peer address: %v, want a refusal", err)
	}

	if err := leader.node.PromoteMember(ctx, "s3"); err != nil {
		t.Fatal(err)
	}
	if in, voter := leader.suffrage(ctx, "s3"); !in || !voter {
		t.Fatalf("s3 after PromoteMember: member %v voter %v", in, voter)
	}
	if err := leader.node.PromoteMember(ctx, "s3"); err != nil {
		t.Fatalf("promoting a voter: %v, want nothing to do", err)
	}

	for name, call := range map[string]func() error{
		"UpdateClientAddress": func() error { return leader.node.UpdateClientAddress(ctx, "nope", "127.0.0.1:1") },
		"PromoteMember":       func() error { return leader.node.PromoteMember(ctx, "nope") },
		"RemoveMember":        func() error { return leader.node.RemoveMember(ctx, "nope") },
		"TransferLeadership":  func() error { _, err := leader.node.TransferLeadership(ctx, "nope"); return err },
	} {
		if err := call(); !errors.Is(err, ErrNoSuchMember) {
			t.Errorf("%s of an unknown member: %v, want ErrNoSuchMember", name, err)
		}
	}

	if err := leader.node.RemoveMember(ctx, "s3"); err != nil {
		t.Fatal(err)
	}
	if in, _ := leader.suffrage(ctx, "s3"); in {
		t.Fatal("s3 is still a member after RemoveMember")
	}
	if got := leader.clientAddress("s3"); got != "" {
		t.Fatalf("removed member's client address is still recorded: %q", got)
	}
	joiner.stop()

	if id, err := leader.node.TransferLeadership(ctx, leader.cfg.ID); err != nil || id != leader.cfg.ID {
		t.Fatalf("transfer to the leader itself: %q, %v", id, err)
	}
	next, err := leader.node.TransferLeadership(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if next == leader.cfg.ID || next == "" {
		t.Fatalf("TransferLeadership returned %q, want another member", next)
	}
	if now, _ := leaderOf(t, ms); now.cfg.ID != next {
		t.Fatalf("%s leads after the transfer, want %s", now.cfg.ID, next)
	}
}
