package raftnode

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/meridian-cp/meridian/services/store/internal/fsm"
)

// notLeader is the error of a request refused before proposing.
func notLeader() error { return fmt.Errorf("%w: %w", ErrNotLeader, ErrNotProposed) }

// Fresh reports whether the node started without raft state: a new member
// that must be added by the leader (or one that lost its data directory).
func (n *Node) Fresh() bool { return n.fresh }

// LeaderID returns the leader's server id, or "" when unknown.
func (n *Node) LeaderID() string {
	_, id := n.raft.LeaderWithID()
	return string(id)
}

// configuration returns the current raft configuration.
func (n *Node) configuration(ctx context.Context) (raft.Configuration, error) {
	f := n.raft.GetConfiguration()
	if err := wait(ctx, f); err != nil {
		return raft.Configuration{}, mapErr(err)
	}
	return f.Configuration(), nil
}

// leaderMember returns the member of the current configuration with id,
// and whether there is one, for a membership change: only the leader makes
// those, so on another member it fails with notLeader.
func (n *Node) leaderMember(ctx context.Context, id string) (raft.Server, bool, error) {
	if !n.IsLeader() {
		return raft.Server{}, false, notLeader()
	}
	conf, err := n.configuration(ctx)
	if err != nil {
		return raft.Server{}, false, err
	}
	for _, s := range conf.Servers {
		if string(s.ID) == id {
			return s, true, nil
		}
	}
	return raft.Server{}, false, nil
}

// noSuchMember is the error of a change that names no member.
func noSuchMember(id string) error { return fmt.Errorf("%w: %q", ErrNoSuchMember, id) }

// UpdateClientAddress records the client address of an existing member
// (ErrNoSuchMember otherwise). Leader only.
func (n *Node) UpdateClientAddress(ctx context.Context, id, clientAddr string) error {
	_, ok, err := n.leaderMember(ctx, id)
	if err != nil {
		return err
	}
	if !ok {
		return noSuchMember(id)
	}
	return n.SetClientAddress(ctx, id, clientAddr)
}

// AddMember adds a voter or a non-voter, after recording its client address
// through the log (so that forwarding works as soon as it is a member).
// For an existing member with the same peer address it only updates the
// client address: members re-register their address this way at start,
// without changing their suffrage. Leader only.
func (n *Node) AddMember(ctx context.Context, id, peerAddr, clientAddr string, nonVoter bool) error {
	s, exists, err := n.leaderMember(ctx, id)
	if err != nil {
		return err
	}
	if exists && string(s.Address) != peerAddr {
		return fmt.Errorf("raftnode: member %q exists with peer address %s; remove it first", id, s.Address)
	}
	if clientAddr != "" {
		if err := n.SetClientAddress(ctx, id, clientAddr); err != nil {
			return err
		}
	}
	if exists {
		return nil
	}
	var f raft.IndexFuture
	if nonVoter {
		f = n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(peerAddr), 0, n.timeout)
	} else {
		f = n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(peerAddr), 0, n.timeout)
	}
	if err := wait(ctx, f); err != nil {
		return mapErr(err)
	}
	n.log.Info("member added", "member", id, "peer_address", peerAddr, "client_address", clientAddr, "voter", !nonVoter)
	return nil
}

// SetClientAddress records a member's client address through the log.
func (n *Node) SetClientAddress(ctx context.Context, id, clientAddr string) error {
	data, err := fsm.EncodeMember(id, clientAddr)
	if err != nil {
		return err
	}
	_, err = n.propose(ctx, data)
	return err
}

// PromoteMember turns a non-voter into a voter. Leader only.
func (n *Node) PromoteMember(ctx context.Context, id string) error {
	s, ok, err := n.leaderMember(ctx, id)
	if err != nil {
		return err
	}
	if !ok {
		return noSuchMember(id)
	}
	if s.Suffrage == raft.Voter {
		return nil
	}
	if err := wait(ctx, n.raft.AddVoter(s.ID, s.Address, 0, n.timeout)); err != nil {
		return mapErr(err)
	}
	n.log.Info("member promoted", "member", id)
	return nil
}

// RemoveMember removes a member and its client address. Leader only. A
// leader removing itself steps down once the change commits.
func (n *Node) RemoveMember(ctx context.Context, id string) error {
	_, ok, err := n.leaderMember(ctx, id)
	if err != nil {
		return err
	}
	if !ok {
		return noSuchMember(id)
	}
	if err := wait(ctx, n.raft.RemoveServer(raft.ServerID(id), 0, n.timeout)); err != nil {
		return mapErr(err)
	}
	n.log.Info("member removed", "member", id)
	if n.IsLeader() {
		// Best effort: a stale address is harmless (lists come from the
		// raft configuration).
		_ = n.SetClientAddress(ctx, id, "")
	}
	return nil
}

// TransferLeadership hands leadership to voter id, or to the most
// up-to-date voter when id is empty, and returns the new leader's id.
func (n *Node) TransferLeadership(ctx context.Context, id string) (string, error) {
	if !n.IsLeader() {
		return "", notLeader()
	}
	if id == n.id {
		return n.id, nil // already the leader
	}
	var f raft.Future
	if id == "" {
		f = n.raft.LeadershipTransfer()
	} else {
		s, ok, err := n.leaderMember(ctx, id)
		if err != nil {
			return "", err
		}
		if !ok || s.Suffrage != raft.Voter {
			return "", fmt.Errorf("%w: %q is not a voter", ErrNoSuchMember, id)
		}
		f = n.raft.LeadershipTransferToServer(s.ID, s.Address)
	}
	if err := wait(ctx, f); err != nil {
		return "", mapErr(err)
	}
	// The old leader learns the new one from its first heartbeat.
	for {
		if id := n.LeaderID(); id != "" && id != n.id {
			return id, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
