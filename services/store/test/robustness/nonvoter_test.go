package robustness

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/client"
)

// A non-voter writes its raft log without fdatasync (package raftwal,
// "Durability"). These tests check what clients rely on around that: a
// non-voter killed (-9) under writes catches up and serves every
// acknowledged write, and non-voters promoted under writes hold, as
// voters, every write acknowledged with them.

// addNonvoter starts a member that joins c as a non-voter, in the first
// region.
func (c *cluster) addNonvoter(id string) *member {
	c.t.Helper()
	return c.addNonvoterIn(id, 0)
}

// addNonvoterIn starts a member that joins c as a non-voter in region,
// behind a proxy of its own like the voters.
func (c *cluster) addNonvoterIn(id string, region int) *member {
	c.t.Helper()
	i := len(c.proxies)
	m := &member{id: id, idx: i, dataDir: c.t.TempDir(), client: freePort(c.t, "127.0.0.1"), peer: freePort(c.t, memberIP(i)),
		metrics: freePort(c.t, "127.0.0.1")}
	p := c.newMemberProxy(i, region, m.peer)
	m.logPath = filepath.Join(filepath.Dir(c.members[0].logPath), id+".log")
	set := map[string]string{"--id": id, "--data-dir": m.dataDir, "--listen": m.client, "--peer-listen": m.peer, "--peer-advertise": p.addr(),
		"--metrics-listen": m.metrics}
	base := c.members[0].args
	for i := 0; i < len(base); i++ {
		name := base[i]
		if name == "--initial-cluster" {
			i++
			continue
		}
		m.args = append(m.args, name)
		if v, ok := set[name]; ok && i+1 < len(base) {
			m.args = append(m.args, v)
			i++
		}
	}
	m.args = append(m.args, "--join", strings.Join(c.endpoints(), ","), "--non-voter")
	c.members = append(c.members, m)
	c.start(m)
	c.waitHealthy(60 * time.Second)
	return m
}

// acked records the writes the cluster acknowledged: key → value.
type acked struct {
	mu      sync.Mutex
	kvs     map[string]string
	errs    int
	lastErr error
}

// write puts prefix<i> for i = 0, 1, ... through cl until ctx ends,
// recording each acknowledged put. Failed puts (members are killed) are
// counted and not retried: their outcome is unknown; the put in flight
// when ctx ends is not counted.
func (a *acked) write(ctx context.Context, cl *client.Client, prefix string) {
	for i := 0; ctx.Err() == nil; i++ {
		k, v := fmt.Sprintf("%s%06d", prefix, i), fmt.Sprint("v", i)
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := cl.KV().Txn(pctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{putOp(k, v)}})
		cancel()
		if err != nil && ctx.Err() != nil {
			return // stopped, not failed
		}
		a.mu.Lock()
		if err == nil {
			a.kvs[k] = v
		} else {
			a.errs++
			a.lastErr = err
		}
		a.mu.Unlock()
	}
}

// missing returns the acknowledged writes under prefix that a range read
// through cl does not return with their value.
func (a *acked) missing(ctx context.Context, cl *client.Client, prefix string, serializable bool) ([]string, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cl.KV().Range(rctx, &storev1.RangeRequest{Key: []byte(prefix), RangeEnd: []byte(prefix[:len(prefix)-1] + string(prefix[len(prefix)-1]+1)), Serializable: serializable})
	if err != nil {
		return nil, err
	}
	got := map[string]string{}
	for _, kv := range resp.GetKvs() {
		got[string(kv.GetKey())] = string(kv.GetValue())
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var miss []string
	for k, v := range a.kvs {
		if got[k] != v {
			miss = append(miss, k)
		}
	}
	slices.Sort(miss)
	return miss, nil
}

// awaitAll waits until a read through cl returns every acknowledged write
// under prefix, and fails the test with the missing ones after timeout.
func (a *acked) awaitAll(t *testing.T, cl *client.Client, prefix string, serializable bool, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		miss, err := a.missing(context.Background(), cl, prefix, serializable)
		if err == nil && len(miss) == 0 {
			return
		}
		if time.Now().After(deadline) {
			if len(miss) > 5 {
				miss = append(miss[:5], "…")
			}
			t.Fatalf("after %v: %d acknowledged writes missing (%v), last error %v", timeout, len(miss), miss, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestNonvoterKilledUnderWritesCatchesUp(t *testing.T) {
	if testing.Short() {
		t.Skip("robustness: skipped with -short (starts a 4-process cluster)")
	}
	c := newCluster(t, 3)
	voters := c.endpoints()
	nv := c.addNonvoter("nv")
	a := &acked{kvs: map[string]string{}}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 2 {
		cl := c.dial(voters...)
		wg.Add(1)
		go func() { defer wg.Done(); a.write(ctx, cl, fmt.Sprintf("nvk/%d/", w)) }()
	}
	for range 2 {
		time.Sleep(2 * time.Second)
		t.Logf("kill -9 the non-voter, restart it")
		nv.kill()
		time.Sleep(time.Second)
		c.start(nv)
	}
	time.Sleep(2 * time.Second)
	stop()
	wg.Wait()
	t.Logf("%d writes acknowledged, %d failed (last: %v)", len(a.kvs), a.errs, a.lastErr)
	if len(a.kvs) == 0 {
		t.Fatal("no write was acknowledged")
	}
	// The non-voter's own (serializable) reads, as a region's gateway
	// and watchfanout make them.
	a.awaitAll(t, c.dial(nv.client), "nvk/", true, 60*time.Second)
}

func TestPromotedNonvotersKeepAcknowledgedWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("robustness: skipped with -short (starts a 5-process cluster)")
	}
	c := newCluster(t, 3)
	old := slices.Clone(c.members)
	nvs := []*member{c.addNonvoter("nv0"), c.addNonvoter("nv1")}
	a := &acked{kvs: map[string]string{}}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	for w := range 2 {
		cl := c.dial()
		wg.Add(1)
		go func() { defer wg.Done(); a.write(ctx, cl, fmt.Sprintf("pk/%d/", w)) }()
	}
	time.Sleep(2 * time.Second)
	admin := c.dial(c.endpoints()[:3]...)
	for _, m := range nvs {
		pctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := admin.Cluster().MemberPromote(pctx, &storev1.MemberPromoteRequest{Id: m.id})
		cancel()
		if err != nil {
			t.Fatalf("promote %s: %v", m.id, err)
		}
		time.Sleep(time.Second)
	}
	// Five voters: writes now commit on three, possibly the two promoted
	// members and the leader.
	time.Sleep(3 * time.Second)
	// Lose a majority of the old voters for good (the leader among them
	// when it is one), and crash the promoted members.
	lost := old[:2]
	if l := c.leader(); l != nil && slices.Contains(old, l) && !slices.Contains(lost, l) {
		lost = []*member{l, old[slices.IndexFunc(old, func(m *member) bool { return m != l })]}
	}
	t.Logf("kill -9 %s and %s for good, kill -9 and restart %s and %s", lost[0].id, lost[1].id, nvs[0].id, nvs[1].id)
	for _, m := range append(slices.Clone(lost), nvs...) {
		m.kill()
	}
	stop()
	wg.Wait()
	t.Logf("%d writes acknowledged, %d failed (last: %v)", len(a.kvs), a.errs, a.lastErr)
	if len(a.kvs) == 0 {
		t.Fatal("no write was acknowledged")
	}
	for _, m := range nvs {
		c.start(m)
	}
	var rest []string
	for _, m := range c.members {
		if !slices.Contains(lost, m) {
			rest = append(rest, m.client)
		}
	}
	// The three remaining voters of five elect a leader, which must hold
	// every acknowledged write: linearizable reads.
	a.awaitAll(t, c.dial(rest...), "pk/", false, 90*time.Second)
}
