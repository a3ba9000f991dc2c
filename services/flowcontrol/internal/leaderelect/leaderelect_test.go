package leaderelect_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/polltest"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/flowcontrol/internal/leaderelect"
	storeapp "github.com/meridian-cp/meridian/services/store/app"
	storeclient "github.com/meridian-cp/meridian/services/store/client"
	"github.com/meridian-cp/meridian/services/store/storetest"
)

// cutKV is a KV client that can be cut off from the store, as a replica
// that crashed or was partitioned away: every call fails from then on.
type cutKV struct {
	storev1.KVServiceClient
	cut atomic.Bool
}

var errCut = errors.New("cut off")

func (k *cutKV) Range(ctx context.Context, in *storev1.RangeRequest, opts ...grpc.CallOption) (*storev1.RangeResponse, error) {
	if k.cut.Load() {
		return nil, errCut
	}
	return k.KVServiceClient.Range(ctx, in, opts...)
}

func (k *cutKV) Txn(ctx context.Context, in *storev1.TxnRequest, opts ...grpc.CallOption) (*storev1.TxnResponse, error) {
	if k.cut.Load() {
		return nil, errCut
	}
	return k.KVServiceClient.Txn(ctx, in, opts...)
}

// replica is one Elector running until stop.
type replica struct {
	e       *leaderelect.Elector
	kv      *cutKV
	stop    context.CancelFunc
	done    chan struct{}
	leading atomic.Bool
	terms   atomic.Int32
}

func startReplica(t *testing.T, kv storev1.KVServiceClient, id string, overlap *atomic.Int32) *replica {
	t.Helper()
	r := &replica{kv: &cutKV{KVServiceClient: kv}, done: make(chan struct{})}
	e, err := leaderelect.New(leaderelect.Config{
		KV: r.kv, Identity: id, Logger: slog.New(slog.DiscardHandler),
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
		OnStartedLeading: func(context.Context) {
			if overlap.Add(1) > 1 {
				t.Errorf("%s leads while another replica leads", id)
			}
			r.leading.Store(true)
			r.terms.Add(1)
		},
		OnStoppedLeading: func() {
			r.leading.Store(false)
			overlap.Add(-1)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.e = e
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	go func() { defer close(r.done); e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

// startStore starts a store member and returns a client of it.
func startStore(t *testing.T) *storeclient.Client {
	t.Helper()
	member := storetest.Start(t, storeapp.Config{ID: "store-0"})
	st, err := storeclient.Dial([]string{member.Addr}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func readLease(t *testing.T, kv storev1.KVServiceClient, key string) *coordinationv1.Lease {
	t.Helper()
	resp, err := kv.Range(t.Context(), &storev1.RangeRequest{Key: []byte(key)})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetKvs()) == 0 {
		return nil
	}
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	var l coordinationv1.Lease
	if err := c.DecodeStorage(resp.GetKvs()[0].GetValue(), resp.GetKvs()[0].GetModRevision(), &l); err != nil {
		t.Fatal(err)
	}
	return &l
}

func leaderOf(rs []*replica) *replica {
	var out *replica
	for _, r := range rs {
		if r.leading.Load() {
			out = r
		}
	}
	return out
}

// TestElection: of three replicas one leads, the Lease names it; a leader
// that stops hands over at once (released Lease); a leader cut off from
// the store stops leading and another takes the Lease once it expires,
// with leaseTransitions counting each change of holder.
func TestElection(t *testing.T) {
	st := startStore(t)
	var overlap atomic.Int32
	var rs []*replica
	for _, id := range []string{"fc-0:7003", "fc-1:7003", "fc-2:7003"} {
		rs = append(rs, startReplica(t, st.KV(), id, &overlap))
	}
	key := rs[0].e.Key()
	if key != "/registry/coordination.k8s.io/leases/kube-system/meridian-flowcontrol" {
		t.Fatalf("lease key %q", key)
	}

	var first *replica
	polltest.Until(t, 10*time.Second, "a leader", func() bool { first = leaderOf(rs); return first != nil })
	id, _ := first.e.Leader()
	l := readLease(t, st.KV(), key)
	if got := *l.Spec.HolderIdentity; got != id {
		t.Fatalf("holderIdentity %q, leader %q", got, id)
	}
	if l.UID == "" || *l.Spec.LeaseDurationSeconds != 2 || *l.Spec.LeaseTransitions != 0 || l.Spec.RenewTime == nil {
		t.Fatalf("lease %+v", l)
	}
	// Followers name the leader.
	for _, r := range rs {
		if r != first {
			polltest.Until(t, 5*time.Second, "a follower names the leader", func() bool {
				h, leading := r.e.Leader()
				return h == id && !leading
			})
		}
	}
	uid := l.UID

	// Graceful stop: the Lease is released and taken by another.
	first.stop()
	<-first.done
	var second *replica
	polltest.Until(t, 10*time.Second, "a second leader", func() bool { second = leaderOf(rs); return second != nil && second != first })
	l = readLease(t, st.KV(), key)
	id2, _ := second.e.Leader()
	if *l.Spec.HolderIdentity != id2 || *l.Spec.LeaseTransitions != 1 || l.UID != uid {
		t.Fatalf("after hand-over: holder %q (leader %q), transitions %d, uid %s (was %s)", *l.Spec.HolderIdentity, id2, *l.Spec.LeaseTransitions, l.UID, uid)
	}

	// Crash: the leader loses the store; it stops leading, and the last
	// replica takes the Lease once it expired.
	second.kv.cut.Store(true)
	polltest.Until(t, 10*time.Second, "the cut-off leader steps down", func() bool { return !second.leading.Load() })
	var third *replica
	polltest.Until(t, 10*time.Second, "a third leader", func() bool {
		third = leaderOf(rs)
		return third != nil && third != first && third != second
	})
	l = readLease(t, st.KV(), key)
	if id3, _ := third.e.Leader(); *l.Spec.HolderIdentity != id3 || *l.Spec.LeaseTransitions != 2 {
		t.Fatalf("after crash: holder %q (leader %q), transitions %d", *l.Spec.HolderIdentity, id3, *l.Spec.LeaseTransitions)
	}
	if _, leading := second.e.Leader(); leading {
		t.Fatal("the cut-off replica still leads")
	}
}

// TestConcurrentCandidates: many candidates started at once on a free
// Lease; exactly one wins every round of compare-and-swap.
func TestConcurrentCandidates(t *testing.T) {
	st := startStore(t)
	var overlap atomic.Int32
	var rs []*replica
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := startReplica(t, st.KV(), id, &overlap)
			mu.Lock()
			rs = append(rs, r)
			mu.Unlock()
		}()
	}
	wg.Wait()
	polltest.Until(t, 10*time.Second, "a leader", func() bool { return leaderOf(rs) != nil })
	time.Sleep(500 * time.Millisecond) // several renewals: no second leader appears
	n := 0
	for _, r := range rs {
		n += int(r.terms.Load())
	}
	if n != 1 {
		t.Fatalf("%d terms started, want 1", n)
	}
}
