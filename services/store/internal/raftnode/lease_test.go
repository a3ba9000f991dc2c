package raftnode

import (
	"context"
	"errors"
	"testing"
	"time"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/mvcc"
)

// putLeaseOp puts key attached to lease.
func putLeaseOp(key, value string, lease int64) *storev1.RequestOp {
	op := putOp(key, value)
	op.GetRequestPut().Lease = lease
	return op
}

// ttlOf returns a lease's remaining and granted TTL from the leader.
func (m *member) ttlOf(ctx context.Context, id int64) (remaining, granted time.Duration) {
	m.t.Helper()
	resp, err := m.node.LeaseTimeToLive(ctx, id, false)
	if err != nil {
		m.t.Fatalf("LeaseTimeToLive(%d): %v", id, err)
	}
	return resp.GetTtl().AsDuration(), resp.GetGrantedTtl().AsDuration()
}

// TestLeaseRules: grants raise short TTLs to MinLeaseTTL and pick an id
// when given none; renewal and time-to-live of an unknown lease; a
// revocation deletes the attached keys and forgets the lease.
func TestLeaseRules(t *testing.T) {
	m := single(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	short, err := m.node.LeaseGrant(ctx, 0, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if short.GetId() <= 0 {
		t.Fatalf("a grant without an id got id %d, want a positive one", short.GetId())
	}
	if _, granted := m.ttlOf(ctx, short.GetId()); granted != MinLeaseTTL {
		t.Fatalf("a 10ms grant has a TTL of %v, want MinLeaseTTL (%v)", granted, MinLeaseTTL)
	}

	const id = 7
	if _, err := m.node.LeaseGrant(ctx, id, time.Hour); err != nil {
		t.Fatal(err)
	}
	if remaining, granted := m.ttlOf(ctx, id); granted != time.Hour || remaining <= 0 || remaining > time.Hour {
		t.Fatalf("lease %d: remaining %v of %v, want (0, 1h] of 1h", id, remaining, granted)
	}
	if ttl, err := m.node.LeaseRenew(ctx, id); err != nil || ttl != time.Hour {
		t.Fatalf("LeaseRenew(%d) = %v, %v; want 1h", id, ttl, err)
	}
	if _, err := m.node.Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{putLeaseOp("leased", "v", id)}}); err != nil {
		t.Fatal(err)
	}
	resp, err := m.node.LeaseTimeToLive(ctx, id, true)
	if err != nil || len(resp.GetKeys()) != 1 || string(resp.GetKeys()[0]) != "leased" {
		t.Fatalf("keys of lease %d: %q, %v; want [leased]", id, resp.GetKeys(), err)
	}

	const unknown = 99
	if _, err := m.node.LeaseRenew(ctx, unknown); !errors.Is(err, mvcc.ErrLeaseNotFound) {
		t.Fatalf("LeaseRenew of an unknown lease: %v, want ErrLeaseNotFound", err)
	}
	if remaining, granted := m.ttlOf(ctx, unknown); remaining != -time.Second || granted != 0 {
		t.Fatalf("unknown lease: remaining %v, granted %v; want -1s, 0", remaining, granted)
	}

	if _, err := m.node.LeaseRevoke(ctx, id); err != nil {
		t.Fatal(err)
	}
	if kv := m.get("leased"); kv != nil {
		t.Fatalf("key of the revoked lease is still there: %v", kv)
	}
	if remaining, _ := m.ttlOf(ctx, id); remaining != -time.Second {
		t.Fatalf("revoked lease: remaining %v, want -1s", remaining)
	}
	if _, err := m.node.LeaseRenew(ctx, id); !errors.Is(err, mvcc.ErrLeaseNotFound) {
		t.Fatalf("LeaseRenew of a revoked lease: %v, want ErrLeaseNotFound", err)
	}
	if _, err := m.node.LeaseRevoke(ctx, id); !errors.Is(err, mvcc.ErrLeaseNotFound) {
		t.Fatalf("second LeaseRevoke: %v, want ErrLeaseNotFound", err)
	}
}

// TestExpiredLeaseIsRevoked: the leader's lessor revokes a lease that was
// not renewed for its TTL, through the log, deleting its keys.
func TestExpiredLeaseIsRevoked(t *testing.T) {
	m := single(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	go m.node.RunLessor(ctx)

	grant, err := m.node.LeaseGrant(ctx, 0, MinLeaseTTL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.node.Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{putLeaseOp("expiring", "v", grant.GetId())}}); err != nil {
		t.Fatal(err)
	}
	for m.get("expiring") != nil {
		select {
		case <-ctx.Done():
			t.Fatalf("the key of a %v lease is still there after 30s", MinLeaseTTL)
		case <-time.After(20 * time.Millisecond):
		}
	}
	// The revocation's entry deletes the keys when it applies; the lessor
	// forgets the lease once the proposal returns, just after.
	for {
		remaining, _ := m.ttlOf(ctx, grant.GetId())
		if remaining == -time.Second {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("expired lease: remaining %v after 30s, want -1s (gone)", remaining)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestNewLeaderGivesLeasesAFullTTL: expiries live only in the leader's
// memory; a member that becomes leader gives every lease a full TTL from
// then, so a lease outlives its expiry across a leader change and never
// expires early.
func TestNewLeaderGivesLeasesAFullTTL(t *testing.T) {
	m := single(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	grant, err := m.node.LeaseGrant(ctx, 0, MinLeaseTTL)
	if err != nil {
		t.Fatal(err)
	}
	m.stop()
	time.Sleep(MinLeaseTTL + 200*time.Millisecond) // past the lease's expiry under the old leader
	m.start()
	m.ready()
	remaining, granted := m.ttlOf(ctx, grant.GetId())
	if granted != MinLeaseTTL || remaining <= 0 {
		t.Fatalf("lease after the leader change: remaining %v of %v, want a full %v from the new term", remaining, granted, MinLeaseTTL)
	}
}

// TestAdmitWrite: AdmitWrite decides on writes that add data (a Txn with a
// put or a delete, a lease grant), refusing them as never proposed; reads,
// compactions, revocations and membership records go on.
func TestAdmitWrite(t *testing.T) {
	errFull := errors.New("disk full")
	var full bool
	m := single(t, func(c *Config) {
		c.AdmitWrite = func() error {
			if full {
				return errFull
			}
			return nil
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rev, _ := m.put(ctx, "k", "v")
	lease, err := m.node.LeaseGrant(ctx, 0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	full = true // the admission hook is called on the caller's goroutine

	del := &storev1.RequestOp{Request: &storev1.RequestOp_RequestDeleteRange{RequestDeleteRange: &storev1.DeleteRangeRequest{Key: []byte("k")}}}
	rng := &storev1.RequestOp{Request: &storev1.RequestOp_RequestRange{RequestRange: &storev1.RangeRequest{Key: []byte("k")}}}
	for _, c := range []struct {
		name    string
		call    func() error
		refused bool
	}{
		{"put", func() error { _, err := m.node.Txn(ctx, putReq("k2", "v")); return err }, true},
		{"delete", func() error {
			_, err := m.node.Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{del}})
			return err
		}, true},
		{"put in the failure branch", func() error {
			_, err := m.node.Txn(ctx, &storev1.TxnRequest{Failure: []*storev1.RequestOp{putOp("k3", "v")}})
			return err
		}, true},
		{"lease grant", func() error { _, err := m.node.LeaseGrant(ctx, 0, time.Hour); return err }, true},
		{"txn that only reads", func() error {
			_, err := m.node.Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{rng}})
			return err
		}, false},
		{"compaction", func() error { _, err := m.node.Compact(ctx, rev); return err }, false},
		{"lease revocation", func() error { _, err := m.node.LeaseRevoke(ctx, lease.GetId()); return err }, false},
		{"membership record", func() error { return m.node.UpdateClientAddress(ctx, "s0", "127.0.0.1:1") }, false},
	} {
		err := c.call()
		switch {
		case c.refused && (!errors.Is(err, errFull) || !errors.Is(err, ErrNotProposed)):
			t.Errorf("%s: %v, want the admission error, not proposed", c.name, err)
		case !c.refused && err != nil:
			t.Errorf("%s: %v, want it served", c.name, err)
		}
	}
	if kv := m.get("k2"); kv != nil {
		t.Fatalf("a refused put was applied: %v", kv)
	}
}
