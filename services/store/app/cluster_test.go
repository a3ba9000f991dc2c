package app

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/client"
	"github.com/meridian-cp/meridian/services/store/internal/testcerts"
)

// node is an in-process member of a TLS cluster on loopback.
type node struct {
	cfg    Config
	app    *App // nil once stopped
	served *daemontest.Served
}

// clusterConfigs returns configs of n voters with mTLS everywhere.
func clusterConfigs(t *testing.T, certs *testcerts.Set, n int) []Config {
	var initial []Member
	var cfgs []Config
	addrs := daemontest.FreeAddrs(t, 2*n)
	for i := range n {
		cfg := Config{
			ID: fmt.Sprintf("s%d", i), DataDir: t.TempDir(), Bootstrap: true, CompactionRetention: -1,
			PeerAddress: addrs[2*i], ClientAddress: addrs[2*i+1], TLS: certs.Server(), ClientTLS: certs.Peer(),
			Logger: testLogger(), HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond,
		}
		initial = append(initial, Member{ID: cfg.ID, PeerAddress: cfg.PeerAddress, ClientAddress: cfg.ClientAddress})
		cfgs = append(cfgs, cfg)
	}
	for i := range cfgs {
		cfgs[i].InitialCluster = initial
	}
	return cfgs
}

// steadyTimeouts gives cfgs raft timeouts of a second, which keep a
// leader on a loaded machine running the race detector, for tests that
// change membership or move leadership themselves: with clusterConfigs'
// 300ms an unplanned election in the middle makes a membership change
// fail ("leadership lost while committing log") or a transfer time out,
// and the test then tests something else.
func steadyTimeouts(cfgs []Config) {
	for i := range cfgs {
		cfgs[i].HeartbeatTimeout, cfgs[i].ElectionTimeout = time.Second, time.Second
	}
}

// startSteadyCluster starts a cluster of n members with steadyTimeouts,
// on certificates of its own, and returns them with the members'
// configurations and the members.
func startSteadyCluster(t *testing.T, n int) (*testcerts.Set, []Config, []*node) {
	t.Helper()
	certs, err := testcerts.New()
	if err != nil {
		t.Fatal(err)
	}
	cfgs := clusterConfigs(t, certs, n)
	steadyTimeouts(cfgs)
	return certs, cfgs, startNodes(t, cfgs...)
}

// startNodes starts members concurrently (they wait for each other); each
// serves on its client address until stop or the end of the test.
func startNodes(t *testing.T, cfgs ...Config) []*node {
	t.Helper()
	nodes := make([]*node, len(cfgs))
	var wg sync.WaitGroup
	errs := make([]error, len(cfgs))
	for i, cfg := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			a, err := New(ctx, cfg)
			if err != nil {
				errs[i] = err
				return
			}
			lis, err := net.Listen("tcp", cfg.ClientAddress)
			if err != nil {
				errs[i] = err
				_ = a.Close()
				return
			}
			nodes[i] = &node{cfg: cfg, app: a, served: daemontest.ServeListener(t, a, lis)}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("start: %v", err)
		}
	}
	return nodes
}

func (nd *node) stop() {
	if nd.app != nil {
		_ = nd.app.Close()
		_ = nd.served.Wait()
		nd.app = nil
	}
}

func endpoints(nodes []*node) []string {
	var eps []string
	for _, nd := range nodes {
		eps = append(eps, nd.cfg.ClientAddress)
	}
	return eps
}

func dialOne(t *testing.T, certs *testcerts.Set, nd *node) *client.Client {
	t.Helper()
	c, err := client.Dial([]string{nd.cfg.ClientAddress}, certs.Client())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func leaderOf(nodes []*node) (leader *node, followers []*node) {
	for _, nd := range nodes {
		if nd.app != nil && nd.app.node.IsLeader() {
			leader = nd
		} else if nd.app != nil {
			followers = append(followers, nd)
		}
	}
	return leader, followers
}

// awaitLeader is leaderOf once the nodes have a leader: after a transfer or
// the removal of the leader, an election may still be running.
func awaitLeader(t *testing.T, nodes []*node) (leader *node, followers []*node) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if leader, followers = leaderOf(nodes); leader != nil {
			return leader, followers
		}
		if time.Now().After(deadline) {
			t.Fatal("no leader within 15s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func putVia(ctx context.Context, c *client.Client, key, val string) (*storev1.TxnResponse, error) {
	return c.KV().Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{put(key, val)}})
}

func getVia(ctx context.Context, c *client.Client, key string, serializable bool) (string, int64, error) {
	r, err := c.KV().Range(ctx, &storev1.RangeRequest{Key: []byte(key), Serializable: serializable})
	if err != nil {
		return "", 0, err
	}
	if len(r.GetKvs()) == 0 {
		return "", r.GetHeader().GetRevision(), nil
	}
	return string(r.GetKvs()[0].GetValue()), r.GetHeader().GetRevision(), nil
}

// TestClusterForwardingReadIndexMembership runs a 3-voter mTLS cluster
// (raft over TLS, forwarding over TLS): writes and linearizable reads on
// followers, a non-voter joining and serving both kinds of reads, member
// list with client addresses, leadership transfer, promotion and removal.
func TestClusterForwardingReadIndexMembership(t *testing.T) {
	certs, cfgs, nodes := startSteadyCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// New returns once its member knows a leader, but on a loaded machine
	// an election may be running again by now.
	leader, followers := awaitLeader(t, nodes)
	if len(followers) != 2 {
		t.Fatalf("want one leader and two followers")
	}
	fc := dialOne(t, certs, followers[0])
	for i := range 20 {
		if _, err := putVia(ctx, fc, fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i)); err != nil {
			t.Fatalf("write via follower: %v", err)
		}
		// Linearizable read on the other follower sees the write at once.
		v, _, err := getVia(ctx, dialOne(t, certs, followers[1]), fmt.Sprintf("k%d", i), false)
		if err != nil || v != fmt.Sprintf("v%d", i) {
			t.Fatalf("linearizable read on follower: %q %v", v, err)
		}
	}

	// A transaction that only reads is served like a linearizable Range:
	// on the other follower it sees a write made through the first one at
	// once, and it is not proposed through raft (50 of them move the
	// leader's commit index by less than 50).
	rc := dialOne(t, certs, followers[1])
	commitIndex := func() uint64 {
		st, err := dialOne(t, certs, leader).Maintenance().Status(ctx, &storev1.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return st.GetCommitIndex()
	}
	before := commitIndex()
	for i := range 50 {
		key := fmt.Sprintf("ro%d", i%5)
		if i < 5 {
			if _, err := putVia(ctx, fc, key, fmt.Sprint(i)); err != nil {
				t.Fatal(err)
			}
		}
		resp, err := rc.KV().Txn(ctx, &storev1.TxnRequest{
			Compare: []*storev1.Compare{{Key: []byte("k19"), Target: storev1.Compare_TARGET_VALUE, Result: storev1.Compare_RESULT_EQUAL,
				TargetUnion: &storev1.Compare_Value{Value: []byte("v19")}}},
			Success: []*storev1.RequestOp{
				{Request: &storev1.RequestOp_RequestRange{RequestRange: &storev1.RangeRequest{Key: []byte(key)}}},
				{Request: &storev1.RequestOp_RequestRange{RequestRange: &storev1.RangeRequest{Key: []byte("k0")}}},
			},
		})
		if err != nil || !resp.GetSucceeded() || len(resp.GetResponses()) != 2 {
			t.Fatalf("read-only txn %d on a follower: %v %v", i, resp, err)
		}
		got := resp.GetResponses()[0].GetResponseRange().GetKvs()
		if len(got) != 1 || string(got[0].GetValue()) != fmt.Sprint(i%5) {
			t.Fatalf("read-only txn %d: %q = %v, want %d", i, key, got, i%5)
		}
	}
	if moved := commitIndex() - before; moved >= 50 {
		t.Fatalf("50 read-only transactions and 5 writes moved the commit index by %d: proposed through raft", moved)
	}

	// A non-voter joins through a follower and serves reads.
	nv := cfgs[0]
	nvAddrs := daemontest.FreeAddrs(t, 2)
	nv.ID, nv.DataDir, nv.PeerAddress, nv.ClientAddress = "nv", t.TempDir(), nvAddrs[0], nvAddrs[1]
	nv.InitialCluster, nv.Join, nv.NonVoter = nil, []string{followers[0].cfg.ClientAddress}, true
	nvNode := startNodes(t, nv)[0]
	nc := dialOne(t, certs, nvNode)
	if v, _, err := getVia(ctx, nc, "k19", false); err != nil || v != "v19" {
		t.Fatalf("linearizable read on non-voter: %q %v", v, err)
	}
	if v, _, err := getVia(ctx, nc, "k0", true); err != nil || v != "v0" {
		t.Fatalf("serializable read on non-voter: %q %v", v, err)
	}
	if _, err := putVia(ctx, nc, "from-nv", "x"); err != nil {
		t.Fatalf("write via non-voter: %v", err)
	}
	// The non-voter knows a voter as its leader (on a loaded machine the
	// leader may have changed since it was looked up above).
	st, err := nc.Maintenance().Status(ctx, &storev1.StatusRequest{})
	if err != nil || st.GetVoter() || !slices.ContainsFunc(nodes, func(n *node) bool { return n.cfg.ID == st.GetLeaderId() }) {
		t.Fatalf("non-voter status: %v %v", st, err)
	}

	// Member list: four members, client addresses recorded.
	all := append(append([]*node{}, nodes...), nvNode)
	deadline := time.Now().Add(15 * time.Second)
	for {
		ml, err := fc.Cluster().MemberList(ctx, &storev1.MemberListRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ok := len(ml.GetMembers()) == 4
		for _, m := range ml.GetMembers() {
			ok = ok && m.GetClientAddress() != "" && m.GetVoter() == (m.GetId() != "nv")
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("member list: %v", ml.GetMembers())
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Leadership transfer, driven from a follower; the multi-endpoint
	// client keeps writing.
	cc, err := client.Dial(endpoints(all), certs.Client())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	tr, err := fc.Cluster().TransferLeadership(ctx, &storev1.TransferLeadershipRequest{Id: followers[1].cfg.ID})
	if err != nil {
		t.Fatalf("transfer: %v", err)
	}
	if tr.GetLeaderId() != followers[1].cfg.ID {
		t.Fatalf("transfer went to %q", tr.GetLeaderId())
	}
	if _, err := putVia(ctx, cc, "after-transfer", "y"); err != nil {
		t.Fatalf("write after transfer: %v", err)
	}

	// Promote then remove the non-voter.
	if _, err := cc.Cluster().MemberPromote(ctx, &storev1.MemberPromoteRequest{Id: "nv"}); err != nil {
		t.Fatalf("promote: %v", err)
	}
	rm, err := cc.Cluster().MemberRemove(ctx, &storev1.MemberRemoveRequest{Id: "nv"})
	if err != nil {
		t.Fatalf("remove: %v", err)
	}
	if len(rm.GetMembers()) != 3 {
		t.Fatalf("after remove: %v", rm.GetMembers())
	}
	if _, err := cc.Cluster().MemberRemove(ctx, &storev1.MemberRemoveRequest{Id: "nope"}); err == nil {
		t.Fatal("removing an unknown member succeeded")
	}
	if v, _, err := getVia(ctx, cc, "from-nv", false); err != nil || v != "x" {
		t.Fatalf("read: %q %v", v, err)
	}
}

// TestMembershipUnderLoadAndRejoinBySnapshot writes continuously through
// the multi-endpoint client while a non-voter joins, is promoted and
// removed and leadership moves; then a follower loses its data directory
// and rejoins, catching up by snapshot because the log was truncated.
// Every acknowledged write is readable at the end, on every member.
func TestMembershipUnderLoadAndRejoinBySnapshot(t *testing.T) {
	certs, err := testcerts.New()
	if err != nil {
		t.Fatal(err)
	}
	cfgs := clusterConfigs(t, certs, 3)
	steadyTimeouts(cfgs)
	for i := range cfgs {
		cfgs[i].SnapshotThreshold, cfgs[i].TrailingLogs, cfgs[i].SnapshotInterval = 64, 16, 100*time.Millisecond
	}
	nodes := startNodes(t, cfgs...)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cc, err := client.Dial(endpoints(nodes), certs.Client())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

	var mu sync.Mutex
	var acked []string
	failures := 0
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; loadCtx.Err() == nil; i++ {
				key := fmt.Sprintf("load-%d-%d", w, i)
				octx, ocancel := context.WithTimeout(loadCtx, 5*time.Second)
				_, err := putVia(octx, cc, key, key)
				ocancel()
				mu.Lock()
				if err == nil {
					acked = append(acked, key)
				} else if loadCtx.Err() == nil {
					failures++
				}
				mu.Unlock()
			}
		}()
	}

	nv := cfgs[0]
	nvAddrs := daemontest.FreeAddrs(t, 2)
	nv.ID, nv.DataDir, nv.PeerAddress, nv.ClientAddress = "nv", t.TempDir(), nvAddrs[0], nvAddrs[1]
	nv.InitialCluster, nv.Join, nv.NonVoter = nil, []string{nodes[1].cfg.ClientAddress}, true
	nvNode := startNodes(t, nv)[0]
	if _, err := cc.Cluster().MemberPromote(ctx, &storev1.MemberPromoteRequest{Id: "nv"}); err != nil {
		t.Fatalf("promote under load: %v", err)
	}
	if _, err := cc.Cluster().TransferLeadership(ctx, &storev1.TransferLeadershipRequest{}); err != nil {
		t.Fatalf("transfer under load: %v", err)
	}
	if _, err := cc.Cluster().MemberRemove(ctx, &storev1.MemberRemoveRequest{Id: "nv"}); err != nil {
		t.Fatalf("remove under load: %v", err)
	}
	nvNode.stop()

	// A follower loses its data directory.
	leader, followers := awaitLeader(t, nodes)
	victim := followers[0]
	victim.stop()
	if err := os.RemoveAll(victim.cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	// The writes go on until both remaining members have snapshotted and
	// truncated their logs (whichever leads when the victim rejoins has
	// no log from index 1 to send it, so it sends a snapshot). How long
	// that takes depends on the machine's load: it is waited for, at
	// most 30s.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		lst, fst := leader.app.node.Status(), followers[1].app.node.Status()
		if lst.FirstIndex > 1 && fst.FirstIndex > 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("logs not truncated after 30s: first index %d on %s (commit %d), %d on %s", lst.FirstIndex, leader.cfg.ID, lst.CommitIndex, fst.FirstIndex, followers[1].cfg.ID)
		}
	}
	rejoin := victim.cfg
	rejoin.Join = []string{leader.cfg.ClientAddress}
	rejoined := startNodes(t, rejoin)[0]
	// Writes go on while the member catches up, until at least 100 were
	// acknowledged in all (at most 30s more).
	time.Sleep(500 * time.Millisecond)
	ackedCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(acked)
	}
	for deadline := time.Now().Add(30 * time.Second); ackedCount() < 100 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	stopLoad()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(acked) < 100 {
		t.Fatalf("only %d writes acknowledged (%d failed)", len(acked), failures)
	}
	t.Logf("%d writes acknowledged, %d failed (unknown outcome) during membership changes", len(acked), failures)
	for _, nd := range []*node{leader, followers[1], rejoined} {
		c := dialOne(t, certs, nd)
		r, err := c.KV().Range(ctx, &storev1.RangeRequest{Key: []byte("load-"), RangeEnd: []byte("load."), KeysOnly: true})
		if err != nil {
			t.Fatalf("%s: %v", nd.cfg.ID, err)
		}
		have := map[string]bool{}
		for _, kv := range r.GetKvs() {
			have[string(kv.GetKey())] = true
		}
		for _, k := range acked {
			if !have[k] {
				t.Fatalf("%s: acknowledged write %s missing", nd.cfg.ID, k)
			}
		}
	}
	if fi := rejoined.app.node.Status().FirstIndex; fi <= 1 {
		t.Errorf("rejoined member's log starts at %d: it did not catch up by snapshot", fi)
	}
}
