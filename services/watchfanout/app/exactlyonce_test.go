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
	start := e.mustPut(configMap("ns", "seed", nil, ""))

	const watchers = 4
	type rec struct {
		mu   sync.Mutex
		got  []change
		last int64
	}
	var recs [watchers]rec
	wctx, stopWatchers := context.WithCancel(ctx)
	defer stopWatchers()
	var wwg sync.WaitGroup
	for i := range watchers {
		wwg.Add(1)
		go func() {
			defer wwg.Done()
			last := start
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
					recs[i].mu.Lock()
					recs[i].got = append(recs[i].got, change{rev: last, name: ev.Object.Metadata.Name, deleted: ev.Type == "DELETED"})
					recs[i].last = last
					recs[i].mu.Unlock()
				}
				s.cancel()
			}
		}()
	}

	// Writers: each owns ten keys and writes them until told to stop.
	const writers = 3
	var acked atomic.Int64
	var ackMu sync.Mutex
	ackedRevs := map[int64]bool{}
	writeCtx, stopWriters := context.WithCancel(ctx)
	defer stopWriters()
	var pwg sync.WaitGroup
	for w := range writers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			live := map[string]bool{} // keys known (acknowledged) to exist
			failures := 0
			for i := 0; writeCtx.Err() == nil; i++ {
				name := fmt.Sprintf("cm-%d-%d", w, rng.Intn(10))
				del := live[name] && rng.Intn(4) == 0
				cctx, cancel := context.WithTimeout(writeCtx, 10*time.Second)
				var rev int64
				var err error
				if del {
					rev, err = e.delExisting(cctx, "ns", name)
				} else {
					rev, err = e.put(cctx, configMap("ns", name, nil, strconv.Itoa(i)))
				}
				cancel()
				if err != nil {
					// Ambiguous: the write may or may not have committed. The
					// key's state is unknown until the next acknowledged put.
					delete(live, name)
					if writeCtx.Err() == nil {
						if failures++; failures > 200 {
							t.Errorf("writer %d: %d failures in a row, last: %v", w, failures, err)
							return
						}
						sleepCtx(writeCtx, 20*time.Millisecond)
					}
					continue
				}
				failures = 0
				live[name] = !del
				ackMu.Lock()
				ackedRevs[rev] = true
				ackMu.Unlock()
				acked.Add(1)
			}
		}()
	}
	// awaitWrites waits until n more writes were acknowledged.
	awaitWrites := func(n int64) {
		t.Helper()
		target := acked.Load() + n
		deadline := time.Now().Add(60 * time.Second)
		for acked.Load() < target {
			if time.Now().After(deadline) {
				t.Fatalf("writes stalled at %d acknowledged, want %d", acked.Load(), target)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	awaitWrites(100)
	before := e.leader()
	resp, err := e.transferLeadership(ctx, "")
	if err != nil {
		t.Fatalf("transfer leadership: %v", err)
	}
	t.Logf("leadership transferred from %s to %s at %d acknowledged writes", before.id, resp.GetLeaderId(), acked.Load())

	awaitWrites(100)
	e.stopFanout()
	e.startFanout("127.0.0.1:0")
	t.Logf("watchfanout restarted at %d acknowledged writes", acked.Load())

	awaitWrites(100)
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
	t.Logf("leader %s, which served the replica's store watch, stopped at %d acknowledged writes", leader.id, acked.Load())

	awaitWrites(100)
	stopWriters()
	pwg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	final := e.mustPut(configMap("ns", "final", nil, ""))
	ackedRevs[final] = true
	t.Logf("%d writes acknowledged, revisions %d..%d", len(ackedRevs), start+1, final)

	// Every watcher catches up with the last write.
	deadline := time.Now().Add(60 * time.Second)
	for i := range watchers {
		for {
			recs[i].mu.Lock()
			last := recs[i].last
			recs[i].mu.Unlock()
			if last >= final {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("watcher %d did not catch up: at %d, want %d", i, last, final)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	stopWatchers()
	wwg.Wait()

	want := e.history(ctx, start, final)
	inHistory := map[int64]bool{}
	for _, c := range want {
		inHistory[c.rev] = true
	}
	for rev := range ackedRevs {
		if !inHistory[rev] {
			t.Errorf("acknowledged write at %d is not in the store's history", rev)
		}
	}
	for i := range watchers {
		// A write whose client gave up when the writers stopped may still
		// commit after the final one (as with etcd: a canceled request is
		// not a withdrawn proposal); what the watchers saw after final is
		// not part of the comparison.
		got := recs[i].got
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
