// Package robustness runs the store's three-member cluster (and five
// voters over three simulated regions with two non-voters, whose members
// send commit notices of their own) as real processes under faults and checks what clients saw: concurrent puts,
// conditional transactions, deletes and linearizable reads while members
// are killed (-9) and restarted and partitioned (a TCP proxy in front of
// every raft listener), the history checked for linearizability with
// porcupine; resumable watchers that must see every committed revision in
// order exactly once; and every acknowledged write present after a kill -9
// of every member mid-load.
//
// The default run takes about a minute. -robustness.duration=5m runs the
// fault cycle for longer (docs/benchmarks-store.md has results).
package robustness

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
)

var duration = flag.Duration("robustness.duration", 0, "run the fault cycle for this long (0: one short cycle, ~25s of traffic)")

// staleReads makes the clients' reads serializable (served by any member
// without confirming it is current): a check of the checker, which should
// then find a non-linearizable history (stale reads from a partitioned or
// lagging member).
var staleReads = flag.Bool("robustness.stale-reads", false, "issue serializable reads (the checker should then fail)")

const clients = 6

// fault is one step of the fault cycle.
type fault struct {
	name string
	run  func(c *cluster)
}

func faults(t *testing.T) []fault {
	restartAfter := func(ms []*member, d time.Duration, c *cluster) {
		for _, m := range ms {
			m.kill()
		}
		time.Sleep(d)
		for _, m := range ms {
			c.start(m)
		}
	}
	return []fault{
		{"kill -9 leader, restart", func(c *cluster) {
			if l := c.leader(); l != nil {
				restartAfter([]*member{l}, 1500*time.Millisecond, c)
			}
		}},
		{"partition leader 3s", func(c *cluster) {
			if l := c.leader(); l != nil {
				c.partition(l.idx)
				time.Sleep(3 * time.Second)
				c.heal()
			}
		}},
		{"kill -9 follower, restart", func(c *cluster) {
			l := c.leader()
			for _, m := range c.members {
				if m != l {
					restartAfter([]*member{m}, 1500*time.Millisecond, c)
					return
				}
			}
		}},
		{"partition follower 2s", func(c *cluster) {
			l := c.leader()
			for _, m := range c.members {
				if m != l {
					c.partition(m.idx)
					time.Sleep(2 * time.Second)
					c.heal()
					return
				}
			}
		}},
		{"kill -9 every member, restart", func(c *cluster) {
			restartAfter(c.members, time.Second, c)
		}},
	}
}

func TestLinearizableUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("robustness: skipped with -short (starts a 3-process cluster)")
	}
	linearizableUnderFaults(t, newCluster(t, 3), 0)
}

// TestLinearizableUnderFaultsFiveVoters runs the same with five voters
// spread 2+2+1 over three regions 5 ms apart each way, a non-voter in each
// of the two last, and clients that pause between operations, so that many
// writes come alone (more than 5 ms after the one before): then a follower
// that stores one tells the other followers of its commit itself
// (raftnode's follower commit notices, which need five voters), before the
// leader does, and a voter far from the leader that learns of it so tells
// the non-voter of its region (relayed commit notices). The members'
// meridian_store_raft_follower_commit_notices_total and
// meridian_store_raft_relayed_commit_notices_total show that they did.
func TestLinearizableUnderFaultsFiveVoters(t *testing.T) {
	if testing.Short() {
		t.Skip("robustness: skipped with -short (starts a 7-process cluster)")
	}
	c := newClusterIn(t, []int{0, 0, 1, 1, 2}, 5*time.Millisecond)
	c.addNonvoterIn("nv1", 1)
	c.addNonvoterIn("nv2", 2)
	linearizableUnderFaults(t, c, 30*time.Millisecond)
	for _, metric := range []string{"meridian_store_raft_follower_commit_notices_total", "meridian_store_raft_relayed_commit_notices_total"} {
		if n := c.metricSum(t, metric); n == 0 {
			t.Errorf("no member counted %s since its last restart: the run did not exercise them", metric)
		} else {
			t.Logf("%s since the last restart: %v", metric, n)
		}
	}
}

// linearizableUnderFaults runs clients (each pausing pause between
// operations) and watchers against c through the fault cycle, then checks
// the history: every acknowledged write present, the final state, every
// watcher's events, and linearizability.
func linearizableUnderFaults(t *testing.T, c *cluster, pause time.Duration) {
	rec := newRecorder()
	trafficCtx, stopTraffic := context.WithCancel(context.Background())
	defer stopTraffic()
	var wg sync.WaitGroup
	for i := range clients {
		cl := c.dial()
		wg.Add(1)
		go func() { defer wg.Done(); runClient(trafficCtx, i, cl, rec, pause) }()
	}
	// Watchers: one following the cluster (re-watching elsewhere), one
	// pinned to each member (keeps going through leader changes, waits
	// out its member's restarts).
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	watchers := []*watcher{{name: "any"}}
	go watchers[0].run(watchCtx, c.dial())
	for _, m := range c.members {
		w := &watcher{name: "pinned-" + m.id}
		watchers = append(watchers, w)
		go w.run(watchCtx, c.dial(m.client))
	}

	// Faults.
	end := time.Now().Add(max(*duration, time.Second))
	fs := faults(t)
	cycles := 0
	for cycles == 0 || time.Now().Before(end) {
		for _, f := range fs {
			time.Sleep(2 * time.Second)
			t.Logf("fault: %s", f.name)
			f.run(c)
		}
		cycles++
		if *duration == 0 {
			break
		}
	}
	time.Sleep(2 * time.Second)
	stopTraffic()
	wg.Wait()
	c.heal()
	c.waitHealthy(60 * time.Second)
	t.Logf("cycles %d, operations: %v", cycles, rec.stats)

	// The reference: the committed history, read back from revision 1.
	cl := c.dial()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	final := linearizableRev(ctx, t, cl)
	ref := readHistory(ctx, t, c, final)
	checkContiguous(t, ref, final)

	// Acknowledged writes are all there (also those acknowledged just
	// before every member was killed).
	byRev := map[int64][]event{}
	for _, e := range ref {
		byRev[e.rev] = append(byRev[e.rev], e)
	}
	lost := 0
	for _, a := range rec.acks {
		found := false
		for _, e := range byRev[a.rev] {
			found = found || (e.key == a.key && e.deleted == a.deleted && (a.deleted || e.value == a.value))
		}
		if !found {
			lost++
			if lost < 10 {
				t.Errorf("acknowledged write lost: %+v", a)
			}
		}
	}
	t.Logf("%d acknowledged writes, all present: %t; final revision %d", len(rec.acks), lost == 0, final)

	// Final state equals the last event of each key.
	last := map[string]event{}
	for _, e := range ref {
		last[e.key] = e
	}
	for k := range numKeys {
		key := fmt.Sprintf("key-%d", k)
		r, err := cl.KV().Range(ctx, &storev1.RangeRequest{Key: []byte(key)})
		if err != nil {
			t.Fatal(err)
		}
		want := last[key]
		got := ""
		if len(r.GetKvs()) > 0 {
			got = string(r.GetKvs()[0].GetValue())
		}
		if want.deleted {
			want.value = ""
		}
		if got != want.value {
			t.Errorf("%s = %q, history says %q", key, got, want.value)
		}
	}

	// Watchers: every event, in order, exactly once.
	for _, w := range watchers {
		deadline := time.Now().Add(20 * time.Second)
		var evs []event
		var err error
		for {
			evs, err = w.snapshot()
			if err != nil || (len(evs) > 0 && evs[len(evs)-1].rev >= final) || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("watcher %s: %v", w.name, err)
			continue
		}
		if !equalEvents(evs, ref) {
			t.Errorf("watcher %s saw %d events, history has %d; first difference at %d", w.name, len(evs), len(ref), firstDiff(evs, ref))
		} else {
			t.Logf("watcher %s: %d events, identical to the history", w.name, len(evs))
		}
	}
	stopWatch()

	// Linearizability.
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(kvModel, rec.ops, 2*time.Minute)
	t.Logf("porcupine: %d operations, result %s in %v", len(rec.ops), res, time.Since(start).Round(time.Millisecond))
	if res != porcupine.Ok {
		f, err := os.CreateTemp("", "porcupine-*.html")
		if err == nil {
			_ = porcupine.Visualize(kvModel, info, f)
			f.Close()
			t.Logf("visualization: %s", f.Name())
		}
		t.Fatalf("history is not linearizable (%s)", res)
	}
}

func linearizableRev(ctx context.Context, t *testing.T, cl interface {
	KV() storev1.KVServiceClient
}) int64 {
	t.Helper()
	r, err := cl.KV().Range(ctx, &storev1.RangeRequest{Key: []byte("key-"), RangeEnd: []byte("key."), CountOnly: true})
	if err != nil {
		t.Fatalf("final read: %v", err)
	}
	return r.GetHeader().GetRevision()
}

// readHistory reads every event from revision 1 to final with a raw watch.
func readHistory(ctx context.Context, t *testing.T, c *cluster, final int64) []event {
	t.Helper()
	cl := c.dial()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := cl.WatchService().Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&storev1.WatchRequest{RequestUnion: &storev1.WatchRequest_CreateRequest{CreateRequest: &storev1.WatchCreateRequest{
		Key: []byte("key-"), RangeEnd: []byte("key."), StartRevision: 1}}}); err != nil {
		t.Fatal(err)
	}
	var evs []event
	for len(evs) == 0 || evs[len(evs)-1].rev < final {
		r, err := s.Recv()
		if err == io.EOF || err != nil {
			t.Fatalf("history watch: %v", err)
		}
		evs = append(evs, flatten(r.GetEvents())...)
	}
	return evs
}

// checkContiguous checks that every revision 1..final has events (every
// write here changes a key) and no key twice in a revision.
func checkContiguous(t *testing.T, ref []event, final int64) {
	t.Helper()
	want := int64(1)
	seen := map[string]bool{}
	for _, e := range ref {
		switch {
		case e.rev == want:
			want++
			seen = map[string]bool{e.key: true}
		case e.rev == want-1:
			if seen[e.key] {
				t.Fatalf("key %s twice at revision %d", e.key, e.rev)
			}
			seen[e.key] = true
		default:
			t.Fatalf("history jumps from revision %d to %d", want-1, e.rev)
		}
	}
	if want-1 != final {
		t.Fatalf("history ends at %d, final revision %d", want-1, final)
	}
}

func equalEvents(a, b []event) bool {
	if len(a) != len(b) {
		return false
	}
	return firstDiff(a, b) == -1
}

func firstDiff(a, b []event) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
