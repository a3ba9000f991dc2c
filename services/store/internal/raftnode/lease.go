package raftnode

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/fsm"
	"github.com/meridian-cp/meridian/services/store/internal/mvcc"
)

// Leases.
//
// Grants and revocations go through the log; renewals do not. The leader
// keeps each lease's expiry in memory (the lessor). When a member becomes
// leader it loads every lease from its state and gives each a full TTL
// from that moment (as etcd does), so a lease never expires earlier than
// its holder could expect, only later, by at most one TTL per leader
// change. The leader revokes expired leases through the log: every
// replica deletes the attached keys at the same revision.

// MinLeaseTTL is the shortest TTL granted; shorter requests are raised to
// it.
const MinLeaseTTL = time.Second

// lessorInterval is how often the leader looks for expired leases.
const lessorInterval = 100 * time.Millisecond

type lessor struct {
	mu     sync.Mutex
	term   uint64 // the term the expiries were loaded for; 0 = not leading
	expiry map[int64]time.Time
	ttl    map[int64]time.Duration
}

// LeaseGrant grants a lease (a random id when id is 0), once admitted
// (Config.AdmitWrite). Leader only.
func (n *Node) LeaseGrant(ctx context.Context, id int64, ttl time.Duration) (*storev1.LeaseGrantResponse, error) {
	if !n.IsLeader() {
		return nil, notLeader()
	}
	if err := n.admitWrite(); err != nil {
		return nil, err
	}
	if err := n.loadLeases(ctx); err != nil {
		return nil, err
	}
	if id == 0 {
		id = rand.Int64N(1<<62) + 1
	}
	ttl = max(ttl, MinLeaseTTL)
	data, err := fsm.EncodeLeaseGrant(&storev1.LeaseGrantRequest{Id: id, Ttl: durationpb.New(ttl)})
	if err != nil {
		return nil, err
	}
	r, err := proposeFor[*storev1.LeaseGrantResponse](ctx, n, data, "lease grant")
	if err != nil {
		return nil, err
	}
	n.lessor.mu.Lock()
	n.lessor.expiry[id], n.lessor.ttl[id] = time.Now().Add(ttl), ttl
	n.lessor.mu.Unlock()
	return r, nil
}

// LeaseRevoke revokes a lease and deletes its keys. Leader only.
func (n *Node) LeaseRevoke(ctx context.Context, id int64) (*storev1.LeaseRevokeResponse, error) {
	if !n.IsLeader() {
		return nil, notLeader()
	}
	data, err := fsm.EncodeLeaseRevoke(id)
	if err != nil {
		return nil, err
	}
	// A lease the state no longer holds leaves the lessor too.
	r, err := proposeFor[*storev1.LeaseRevokeResponse](ctx, n, data, "lease revoke")
	if err != nil && !errors.Is(err, mvcc.ErrLeaseNotFound) {
		return nil, err
	}
	n.lessor.mu.Lock()
	delete(n.lessor.expiry, id)
	delete(n.lessor.ttl, id)
	n.lessor.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return r, nil
}

// LeaseRenew renews a lease for its full TTL and returns the TTL. Leader
// only; mvcc.ErrLeaseNotFound for an unknown (or expired) lease.
func (n *Node) LeaseRenew(ctx context.Context, id int64) (time.Duration, error) {
	if !n.IsLeader() {
		return 0, notLeader()
	}
	if err := n.loadLeases(ctx); err != nil {
		return 0, err
	}
	n.lessor.mu.Lock()
	defer n.lessor.mu.Unlock()
	ttl, ok := n.lessor.ttl[id]
	if !ok || time.Now().After(n.lessor.expiry[id]) {
		return 0, fmt.Errorf("%w: %d", mvcc.ErrLeaseNotFound, id)
	}
	n.lessor.expiry[id] = time.Now().Add(ttl)
	return ttl, nil
}

// LeaseTimeToLive reports a lease's remaining and granted TTL (remaining
// -1s when it does not exist) and, if keys, its attached keys. Leader only.
func (n *Node) LeaseTimeToLive(ctx context.Context, id int64, keys bool) (*storev1.LeaseTimeToLiveResponse, error) {
	if !n.IsLeader() {
		return nil, notLeader()
	}
	if err := n.loadLeases(ctx); err != nil {
		return nil, err
	}
	n.lessor.mu.Lock()
	ttl, ok := n.lessor.ttl[id]
	exp := n.lessor.expiry[id]
	n.lessor.mu.Unlock()
	resp := &storev1.LeaseTimeToLiveResponse{Id: id, Ttl: durationpb.New(-time.Second)}
	if !ok {
		return resp, nil
	}
	resp.Ttl, resp.GrantedTtl = durationpb.New(max(time.Until(exp), 0)), durationpb.New(ttl)
	if keys {
		ks, err := n.fsm.LeaseKeys(id)
		if err != nil {
			return nil, err
		}
		resp.Keys = ks
	}
	return resp, nil
}

// loadLeases loads every lease with a full TTL the first time it is called
// in a term in which this member leads (after the term's barrier, so the
// state holds every grant committed before).
func (n *Node) loadLeases(ctx context.Context) error {
	term := n.raft.CurrentTerm()
	n.lessor.mu.Lock()
	loaded := n.lessor.term == term
	n.lessor.mu.Unlock()
	if loaded {
		return nil
	}
	if err := n.leaderBarrier(ctx); err != nil {
		return err
	}
	ls, err := n.fsm.Leases()
	if err != nil {
		return err
	}
	now := time.Now()
	n.lessor.mu.Lock()
	defer n.lessor.mu.Unlock()
	if n.lessor.term == term {
		// Another caller (the lessor loop, a grant) loaded this term
		// meanwhile, and grants may have been recorded since: replacing the
		// maps with this older read of the state would lose them (a lease
		// that reports itself gone and never expires).
		return nil
	}
	n.lessor.term = term
	n.lessor.expiry, n.lessor.ttl = map[int64]time.Time{}, map[int64]time.Duration{}
	for id, ms := range ls {
		ttl := time.Duration(ms) * time.Millisecond
		n.lessor.expiry[id], n.lessor.ttl[id] = now.Add(ttl), ttl
	}
	return nil
}

// RunLessor revokes expired leases while this member leads, until ctx
// ends.
func (n *Node) RunLessor(ctx context.Context) {
	t := time.NewTicker(lessorInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !n.IsLeader() {
			n.lessor.mu.Lock()
			n.lessor.term = 0
			n.lessor.mu.Unlock()
			continue
		}
		if err := n.loadLeases(ctx); err != nil {
			continue
		}
		now := time.Now()
		var expired []int64
		n.lessor.mu.Lock()
		for id, exp := range n.lessor.expiry {
			if now.After(exp) {
				expired = append(expired, id)
			}
		}
		n.lessor.mu.Unlock()
		for _, id := range expired {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := n.LeaseRevoke(rctx, id)
			cancel()
			if err != nil {
				n.log.Warn("revoking an expired lease", "lease", id, "error", err)
			} else {
				n.log.Debug("lease expired", "lease", id)
			}
		}
	}
}
