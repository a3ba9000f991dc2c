package app_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/polltest"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	watchv1 "github.com/meridian-cp/meridian/proto/gen/meridian/watch/v1"
	"github.com/meridian-cp/meridian/services/watchfanout/app"
)

// change is one event as a watcher or the store reports it.
type change struct {
	rev     int64
	name    string
	deleted bool
}

func (c change) String() string {
	if c.deleted {
		return fmt.Sprintf("%d:-%s", c.rev, c.name)
	}
	return fmt.Sprintf("%d:%s", c.rev, c.name)
}

// TestEveryChangeExactlyOnceAcrossLeaderChangeAndRestart: against a
// 3-voter store, watchers that re-watch from their last resourceVersion
// whenever their stream ends receive every committed change, in revision
// order, exactly once, while writers keep writing and, in turn, leadership
// is transferred, the watchfanout replica restarts, and the leader — made
// the member that serves the replica's store watch — is stopped (two
// voters carry on). The replica is configured with every member's address
// and must resume its store watch on another member.
//
// A write that fails is ambiguous (it may have committed); the committed
// history is read back from the store at the end, every acknowledged write
// must be in it, and every watcher must have received exactly it.
func TestEveryChangeExactlyOnceAcrossLeaderChangeAndRestart(t *testing.T) {
	e := newClusterEnv(t, app.Config{}, 3)
	ctx := t.Context()
	w := startWorkload(e)

	w.awaitWrites(100)
	before := e.leader()
	resp, err := e.transferLeadership(ctx, "")
	if err != nil {
		t.Fatalf("transfer leadership: %v", err)
	}
	t.Logf("leadership transferred from %s to %s at %d acknowledged writes", before.id, resp.GetLeaderId(), w.acked.Load())

	w.awaitWrites(100)
	e.stopFanout()
	e.startFanout("127.0.0.1:0")
	t.Logf("watchfanout restarted at %d acknowledged writes", w.acked.Load())

	w.awaitWrites(100)
	// Stop the leader, and make it the member that serves the replica's
	// store watch, so that the watch breaks too.
	var following *storeMember
	for _, m := range e.stores {
		if m.app != nil && m.watchers(t) > 0 {
			following = m
		}
	}
	if following == nil {
		t.Fatal("no store member serves the replica's watch")
	}
	if e.leader() != following {
		if _, err := e.transferLeadership(ctx, following.id); err != nil {
			t.Fatalf("transfer leadership to %s: %v", following.id, err)
		}
	}
	leader := e.leader()
	if leader != following {
		t.Fatalf("leader %s, want %s", leader.id, following.id)
	}
	leader.stop()
	t.Logf("leader %s, which served the replica's store watch, stopped at %d acknowledged writes", leader.id, w.acked.Load())

	w.awaitWrites(100)
	w.check(ctx)
}

// TestEveryChangeExactlyOnceResumingOnALaggingMember: the replica's store
// watch resumes on a member that is behind the revision it asks for —
// restarted a moment before, still catching up — when the member serving
// it stops. The replica knows only those two members, so it must resume
// on the lagging one; watchers still receive every change exactly once.
func TestEveryChangeExactlyOnceResumingOnALaggingMember(t *testing.T) {
	e := newClusterEnv(t, app.Config{}, 3)
	ctx := t.Context()
	known := e.stores[:2]
	e.stopFanout()
	e.cfg.StoreAddress = known[0].addr + "," + known[1].addr
	e.startFanout("127.0.0.1:0")
	// The one store watch left is the new replica's (the old one's ends
	// with its stream).
	var serving, lagging *storeMember
	polltest.Until(t, 10*time.Second, "the replica's store watch alone on one member", func() bool {
		total := 0.0
		for _, m := range e.stores {
			total += m.watchers(t)
		}
		serving, lagging = known[0], known[1]
		if known[1].watchers(t) > 0 {
			serving, lagging = known[1], known[0]
		}
		return total == 1 && serving.watchers(t) == 1
	})
	w := startWorkload(e)

	w.awaitWrites(50)
	lagging.stop()
	w.awaitWrites(150)
	lagging.restart(t)
	behind := w.lastAcked() - int64(lagging.gauge(t, "meridian_store_current_revision"))
	serving.stop()
	t.Logf("%s restarted %d revisions behind the last acknowledged write, and %s (serving the replica's store watch) stopped at %d acknowledged writes",
		lagging.id, behind, serving.id, w.acked.Load())

	w.awaitWrites(100)
	polltest.Until(t, 10*time.Second, "the replica's store watch on "+lagging.id, func() bool { return lagging.watchers(t) > 0 })
	w.check(ctx)
}

// workload is the exactly-once tests' load on namespace "ns": watchers
// that re-watch through the replica from their last resourceVersion
// whenever their stream ends, and writers that each own ten keys and put
// or delete them until check.
type workload struct {
	e     *env
	start int64 // the revision the watchers start after
	recs  [4]watchRecord

	acked atomic.Int64
	ackMu sync.Mutex
	revs  map[int64]bool // the revisions of the acknowledged writes

	stopWatchers, stopWriters context.CancelFunc
	watching, writing         sync.WaitGroup
}

// watchRecord is what one watcher received.
type watchRecord struct {
	mu   sync.Mutex
	got  []change
	last int64
}

// startWorkload writes a first object and starts the watchers after it
// and the writers.
func startWorkload(e *env) *workload {
	t := e.t
	w := &workload{e: e, start: e.mustPut(configMap("ns", "seed", nil, "")), revs: map[int64]bool{}}
	wctx, stopWatchers := context.WithCancel(t.Context())
	w.stopWatchers = stopWatchers
	t.Cleanup(stopWatchers)
	for i := range w.recs {
		rec := &w.recs[i]
		w.watching.Add(1)
		go func() {
			defer w.watching.Done()
			last := w.start
			for wctx.Err() == nil {
				s, err := e.openWatch(wctx, &watchv1.WatchRequest{Resource: cmResource, Namespace: "ns", ResourceVersion: strconv.FormatInt(last, 10)})
				if err != nil {
					// The replica is restarting or not synced yet.
					sleepCtx(wctx, 50*time.Millisecond)
					continue
				}
				for ev := range s.events {
					if ev.Type == "ERROR" {
						t.Errorf("watcher %d: ERROR %+v", i, ev.Object)
						break
					}
					last = ev.rv()
					rec.mu.Lock()
					rec.got = append(rec.got, change{rev: last, name: ev.Object.Metadata.Name, deleted: ev.Type == "DELETED"})
					rec.last = last
					rec.mu.Unlock()
				}
				s.cancel()
			}
		}()
	}

	writeCtx, stopWriters := context.WithCancel(t.Context())
	w.stopWriters = stopWriters
	t.Cleanup(stopWriters)
	for i := range 3 {
		w.writing.Add(1)
		go func() {
			defer w.writing.Done()
			rng := rand.New(rand.NewSource(int64(i)))
			live := map[string]bool{} // keys known (acknowledged) to exist
			failures := 0
			for n := 0; writeCtx.Err() == nil; n++ {
				name := fmt.Sprintf("cm-%d-%d", i, rng.Intn(10))
				del := live[name] && rng.Intn(4) == 0
				cctx, cancel := context.WithTimeout(writeCtx, 10*time.Second)
				var rev int64
				var err error
				if del {
					rev, err = e.delExisting(cctx, "ns", name)
				} else {
					rev, err = e.put(cctx, configMap("ns", name, nil, strconv.Itoa(n)))
				}
				cancel()
				if err != nil {
					// Ambiguous: the write may or may not have committed. The
					// key's state is unknown until the next acknowledged put.
					delete(live, name)
					if writeCtx.Err() == nil {
						if failures++; failures > 200 {
							t.Errorf("writer %d: %d failures in a row, last: %v", i, failures, err)
							return
						}
						sleepCtx(writeCtx, 20*time.Millisecond)
					}
					continue
				}
				failures = 0
				live[name] = !del
				w.ackMu.Lock()
				w.revs[rev] = true
				w.ackMu.Unlock()
				w.acked.Add(1)
			}
		}()
	}
	return w
}

// lastAcked is the revision of the last acknowledged write.
func (w *workload) lastAcked() int64 {
	w.ackMu.Lock()
	defer w.ackMu.Unlock()
	var last int64
	for rev := range w.revs {
		last = max(last, rev)
	}
	return last
}

// awaitWrites waits until n more writes were acknowledged.
func (w *workload) awaitWrites(n int64) {
	w.e.t.Helper()
	target := w.acked.Load() + n
	deadline := time.Now().Add(60 * time.Second)
	for w.acked.Load() < target {
		if time.Now().After(deadline) {
			w.e.t.Fatalf("writes stalled at %d acknowledged, want %d", w.acked.Load(), target)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// check stops the writers, writes a last object, waits for every watcher
// to receive it, and checks that each received the store's history since
// start exactly, and that the history holds every acknowledged write.
func (w *workload) check(ctx context.Context) {
	e, t := w.e, w.e.t
	t.Helper()
	w.stopWriters()
	w.writing.Wait()
	if t.Failed() {
		t.FailNow()
	}
	final := e.mustPut(configMap("ns", "final", nil, ""))
	w.revs[final] = true
	t.Logf("%d writes acknowledged, revisions %d..%d", len(w.revs), w.start+1, final)

	// Every watcher catches up with the last write.
	deadline := time.Now().Add(60 * time.Second)
	for i := range w.recs {
		for {
			w.recs[i].mu.Lock()
			last := w.recs[i].last
			w.recs[i].mu.Unlock()
			if last >= final {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("watcher %d did not catch up: at %d, want %d", i, last, final)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	w.stopWatchers()
	w.watching.Wait()

	want := e.history(ctx, w.start, final)
	inHistory := map[int64]bool{}
	for _, c := range want {
		inHistory[c.rev] = true
	}
	for rev := range w.revs {
		if !inHistory[rev] {
			t.Errorf("acknowledged write at %d is not in the store's history", rev)
		}
	}
	for i := range w.recs {
		// A write whose client gave up when the writers stopped may still
		// commit after the final one (as with etcd: a canceled request is
		// not a withdrawn proposal); what the watchers saw after final is
		// not part of the comparison.
		got := w.recs[i].got
		if n := slices.IndexFunc(got, func(c change) bool { return c.rev > final }); n >= 0 {
			got = got[:n]
		}
		for j := range max(len(got), len(want)) {
			if j >= len(got) || j >= len(want) || got[j] != want[j] {
				t.Fatalf("watcher %d: %d events, want %d; first difference at %d: got %v, want %v",
					i, len(got), len(want), j, at(got, j), at(want, j))
			}
		}
	}
}

// at returns s[i] as a string, or "none" past its end.
func at(s []change, i int) string {
	if i < len(s) {
		return s[i].String()
	}
	return "none"
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// delExisting deletes a key the caller knows exists and returns the
// revision of the delete; an error if nothing was deleted (the revision
// would not be a change).
func (e *env) delExisting(ctx context.Context, ns, name string) (int64, error) {
	resp, err := e.kv.Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestDeleteRange{RequestDeleteRange: &storev1.DeleteRangeRequest{Key: []byte(e.cms.Key(ns, name))}}}}})
	if err != nil {
		return 0, err
	}
	if n := resp.GetResponses()[0].GetResponseDeleteRange().GetDeleted(); n != 1 {
		return 0, fmt.Errorf("delete of %s/%s deleted %d keys", ns, name, n)
	}
	return resp.GetHeader().GetRevision(), nil
}

// transferLeadership transfers the store's leadership to member id (""
// any), trying again when the transfer timed out: raft gives the target
// one election timeout (300ms here) to catch up and win, which a loaded
// machine does not always grant.
func (e *env) transferLeadership(ctx context.Context, id string) (*storev1.TransferLeadershipResponse, error) {
	for attempt := 1; ; attempt++ {
		resp, err := e.sc.Cluster().TransferLeadership(ctx, &storev1.TransferLeadershipRequest{Id: id})
		if err == nil || attempt == 10 || !strings.Contains(err.Error(), "leadership transfer timeout") {
			return resp, err
		}
		e.t.Logf("transfer leadership: %v; again", err)
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// leader returns the store member that currently leads, waiting for an
// election if there is none.
func (e *env) leader() *storeMember {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(e.t.Context(), 2*time.Second)
		resp, err := e.sc.Cluster().MemberList(ctx, &storev1.MemberListRequest{})
		cancel()
		for _, m := range resp.GetMembers() {
			if !m.GetLeader() {
				continue
			}
			for _, s := range e.stores {
				if s.addr == m.GetClientAddress() && s.app != nil {
					return s
				}
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no leader within 15s (last error: %v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// errEnough ends a history read.
var errEnough = errors.New("enough")

// history reads the changes of namespace "ns" in (from, to] from the
// store's own watch: the committed history the watchers must have seen.
func (e *env) history(ctx context.Context, from, to int64) []change {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	prefix := e.cms.Key("ns", "")
	end := []byte(prefix)
	end[len(end)-1]++
	var out []change
	err := e.sc.Watch(ctx, &storev1.WatchCreateRequest{Key: []byte(prefix), RangeEnd: end, StartRevision: from + 1}, func(resp *storev1.WatchResponse) error {
		for _, ev := range resp.GetEvents() {
			kv := ev.GetKv()
			if kv.GetModRevision() > to {
				return errEnough
			}
			out = append(out, change{rev: kv.GetModRevision(), name: strings.TrimPrefix(string(kv.GetKey()), prefix), deleted: ev.GetType() == storev1.Event_TYPE_DELETE})
			if kv.GetModRevision() == to {
				return errEnough
			}
		}
		return nil
	})
	if !errors.Is(err, errEnough) {
		e.t.Fatalf("read the store's history: %v", err)
	}
	return out
}
