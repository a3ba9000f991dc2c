package app

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/client"
	"github.com/meridian-cp/meridian/services/store/internal/testcerts"
)

func leasedPut(key string, lease int64) *storev1.TxnRequest {
	return &storev1.TxnRequest{Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestPut{
		RequestPut: &storev1.PutRequest{Key: []byte(key), Value: []byte("v"), Lease: lease}}}}}
}

// TestLeasesExpireKeepAliveRevoke runs leases on a 3-member cluster
// through a follower: keys attached to a lease that is kept alive stay;
// once renewals stop, the leader revokes it through the log and every
// member deletes its keys at the same revision; revoke deletes at once.
func TestLeasesExpireKeepAliveRevoke(t *testing.T) {
	// Steady timeouts: an unplanned election may leave a write's outcome
	// unknown (UNAVAILABLE "leadership lost while committing log", which
	// no client retries), and this test checks leases, not that. Keep-
	// alives across a leader change: TestLeaseKeepAliveSurvivesLeaderChange.
	certs, _, nodes := startSteadyCluster(t, 3)
	_, followers := awaitLeader(t, nodes)
	fc := dialOne(t, certs, followers[0])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	if _, err := fc.KV().Txn(ctx, leasedPut("orphan", 12345)); status.Code(err) != codes.NotFound {
		t.Fatalf("put with an unknown lease: %v, want NOT_FOUND", err)
	}
	// The TTL leaves room for the grant, two puts and a read on a loaded
	// machine (a 1s TTL expired before them under a busy CI run).
	const leaseTTL = 4 * time.Second
	g, err := fc.Lease().LeaseGrant(ctx, &storev1.LeaseGrantRequest{Ttl: durationpb.New(leaseTTL)})
	if err != nil || g.GetId() == 0 {
		t.Fatalf("grant: %v %v", g, err)
	}
	if _, err := fc.Lease().LeaseGrant(ctx, &storev1.LeaseGrantRequest{Id: g.GetId(), Ttl: durationpb.New(leaseTTL)}); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("grant of an existing id: %v", err)
	}
	for _, k := range []string{"lk1", "lk2"} {
		if _, err := fc.KV().Txn(ctx, leasedPut(k, g.GetId())); err != nil {
			t.Fatalf("put with lease: %v", err)
		}
	}
	ttl, err := fc.Lease().LeaseTimeToLive(ctx, &storev1.LeaseTimeToLiveRequest{Id: g.GetId(), Keys: true})
	if err != nil || len(ttl.GetKeys()) != 2 || ttl.GetGrantedTtl().AsDuration() != leaseTTL {
		t.Fatalf("time to live: %v %v", ttl, err)
	}

	// Keep alive through the follower for 6s (> TTL): keys stay.
	ka, err := fc.Lease().LeaseKeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 12 {
		if err := ka.Send(&storev1.LeaseKeepAliveRequest{Id: g.GetId()}); err != nil {
			t.Fatal(err)
		}
		r, err := ka.Recv()
		if err != nil || r.GetTtl().AsDuration() != leaseTTL {
			t.Fatalf("keep alive: %v %v", r, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if v, _, err := getVia(ctx, fc, "lk1", false); err != nil || v != "v" {
		t.Fatalf("kept-alive key: %q %v", v, err)
	}
	_ = ka.CloseSend()

	// Stop renewing: the keys go, on every member, in one revision.
	deadline := time.Now().Add(20 * time.Second)
	for {
		v, _, err := getVia(ctx, fc, "lk1", false)
		if err != nil {
			t.Fatal(err)
		}
		if v == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("lease did not expire")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, nd := range nodes {
		r, err := dialOne(t, certs, nd).KV().Range(ctx, &storev1.RangeRequest{Key: []byte("lk"), RangeEnd: []byte("ll")})
		if err != nil || len(r.GetKvs()) != 0 {
			t.Fatalf("%s after expiry: %v %v", nd.cfg.ID, r.GetKvs(), err)
		}
	}
	if ttl, err := fc.Lease().LeaseTimeToLive(ctx, &storev1.LeaseTimeToLiveRequest{Id: g.GetId()}); err != nil || ttl.GetTtl().AsDuration() >= 0 {
		t.Fatalf("time to live of an expired lease: %v %v", ttl, err)
	}

	// Revoke deletes the attached keys at once, in one revision.
	cc := dialAll(t, certs, nodes)
	g2, err := cc.Lease().LeaseGrant(ctx, &storev1.LeaseGrantRequest{Ttl: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"rk1", "rk2"} {
		if _, err := cc.KV().Txn(ctx, leasedPut(k, g2.GetId())); err != nil {
			t.Fatal(err)
		}
	}
	rv, err := cc.Lease().LeaseRevoke(ctx, &storev1.LeaseRevokeRequest{Id: g2.GetId()})
	if err != nil {
		t.Fatalf("revoke: %v", err)
	}
	r, err := cc.KV().Range(ctx, &storev1.RangeRequest{Key: []byte("rk"), RangeEnd: []byte("rl"), Revision: rv.GetHeader().GetRevision() - 1})
	if err != nil || len(r.GetKvs()) != 2 {
		t.Fatalf("before the revoke's revision: %v %v", r.GetKvs(), err)
	}
	r, err = cc.KV().Range(ctx, &storev1.RangeRequest{Key: []byte("rk"), RangeEnd: []byte("rl")})
	if err != nil || len(r.GetKvs()) != 0 {
		t.Fatalf("after revoke: %v %v", r.GetKvs(), err)
	}
	if _, err := cc.Lease().LeaseRevoke(ctx, &storev1.LeaseRevokeRequest{Id: g2.GetId()}); status.Code(err) != codes.NotFound {
		t.Fatalf("second revoke: %v", err)
	}
}

func dialAll(t *testing.T, certs *testcerts.Set, nodes []*node) *client.Client {
	t.Helper()
	c, err := client.Dial(endpoints(nodes), certs.Client())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestLeaseKeepAliveSurvivesLeaderChange moves leadership twice under two
// open keep-alive streams, one opened on the leader and one on a
// follower: each stream goes on renewing the lease (renewals are safe to
// send again), as a client's stream must across an election.
func TestLeaseKeepAliveSurvivesLeaderChange(t *testing.T) {
	certs, _, nodes := startSteadyCluster(t, 3)
	leader, followers := awaitLeader(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const leaseTTL = time.Minute
	g, err := dialAll(t, certs, nodes).Lease().LeaseGrant(ctx, &storev1.LeaseGrantRequest{Ttl: durationpb.New(leaseTTL)})
	if err != nil {
		t.Fatal(err)
	}
	streams := map[string]storev1.LeaseService_LeaseKeepAliveClient{}
	for _, nd := range []*node{leader, followers[0]} {
		ka, err := dialOne(t, certs, nd).Lease().LeaseKeepAlive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		streams[nd.cfg.ID] = ka
	}
	keepAlive := func(when string) {
		t.Helper()
		for id, ka := range streams {
			if err := ka.Send(&storev1.LeaseKeepAliveRequest{Id: g.GetId()}); err != nil {
				t.Fatalf("%s: send on the stream opened on %s: %v", when, id, err)
			}
			r, err := ka.Recv()
			if err != nil || r.GetId() != g.GetId() || r.GetTtl().AsDuration() != leaseTTL {
				t.Fatalf("%s: keep alive on the stream opened on %s: %v %v", when, id, r, err)
			}
		}
	}
	keepAlive("before any transfer")

	// To the member neither stream is on: both relay to it.
	transfer(ctx, t, nodes, followers[1])
	keepAlive("after the transfer to " + followers[1].cfg.ID)
	// To the member of the follower's stream: it renews locally.
	transfer(ctx, t, nodes, followers[0])
	keepAlive("after the transfer to " + followers[0].cfg.ID)
}

// transfer moves leadership to target with raft's leadership transfer and
// waits until every member knows target leads.
func transfer(ctx context.Context, t *testing.T, nodes []*node, target *node) {
	t.Helper()
	from, _ := awaitLeader(t, nodes)
	if id, err := from.app.node.TransferLeadership(ctx, target.cfg.ID); err != nil || id != target.cfg.ID {
		t.Fatalf("transfer to %s: %q %v", target.cfg.ID, id, err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for _, nd := range nodes {
		for nd.app.node.LeaderID() != target.cfg.ID {
			if time.Now().After(deadline) {
				t.Fatalf("%s does not know %s leads", nd.cfg.ID, target.cfg.ID)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
