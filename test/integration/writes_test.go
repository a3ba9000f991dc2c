package integration

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/codec"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/retry"
)

// TestEventsExpire: Events are stored on a store lease that ends about an
// hour after their last write, so they disappear on their own.
func TestEventsExpire(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ev, err := e.client.CoreV1().Events("default").Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "ev1"},
		InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Namespace: "default", Name: "x"},
		Reason:         "Tested", Message: "an event", Type: corev1.EventTypeNormal,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if list, err := e.client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=x,reason=Tested"}); err != nil || len(list.Items) != 1 {
		t.Fatalf("field-selected events: %v %v", err, list)
	}
	kv := storev1.NewKVServiceClient(e.storeConn(gatewayCert))
	r, err := kv.Range(ctx, &storev1.RangeRequest{Key: []byte("/registry/events/default/" + ev.Name)})
	if err != nil || len(r.Kvs) != 1 {
		t.Fatalf("the event in the store: %v %v", err, r)
	}
	lease := r.Kvs[0].GetLease()
	if lease == 0 {
		t.Fatal("the event is not attached to a lease")
	}
	ttl, err := storev1.NewLeaseServiceClient(e.storeConn(gatewayCert)).LeaseTimeToLive(ctx, &storev1.LeaseTimeToLiveRequest{Id: lease})
	if err != nil {
		t.Fatal(err)
	}
	if d := ttl.GetTtl().AsDuration(); d < 59*time.Minute || d > 62*time.Minute {
		t.Errorf("the event's lease has %v left, want about an hour", d)
	}
	// A ConfigMap does not expire.
	if _, err := e.client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "stays"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err = kv.Range(ctx, &storev1.RangeRequest{Key: []byte("/registry/configmaps/default/stays")})
	if err != nil || len(r.Kvs) != 1 || r.Kvs[0].GetLease() != 0 {
		t.Errorf("a configmap on a lease: %v %v", err, r)
	}
}

// TestRetryOnConflict: 8 goroutines increment one counter with
// read-modify-write updates under client-go's RetryOnConflict; every lost
// race is a 409 Conflict and the final value counts every increment.
func TestRetryOnConflict(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cms := e.client.CoreV1().ConfigMaps("default")
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "counter"}, Data: map[string]string{"n": "0"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 25
	var conflicts, others atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				// DefaultBackoff gives up after 4 tries, which 8 writers on one
				// object exhaust (against kube-apiserver too). No Cap: in
				// wait.Backoff, reaching the cap ends the retries.
				err := retry.RetryOnConflict(wait.Backoff{Steps: 60, Duration: 2 * time.Millisecond, Factor: 1.1, Jitter: 1}, func() error {
					cur, err := cms.Get(ctx, "counter", metav1.GetOptions{})
					if err != nil {
						return err
					}
					n, _ := strconv.Atoi(cur.Data["n"])
					cur.Data["n"] = strconv.Itoa(n + 1)
					_, err = cms.Update(ctx, cur, metav1.UpdateOptions{})
					if apierrors.IsConflict(err) {
						conflicts.Add(1)
					} else if err != nil {
						others.Add(1)
					}
					return err
				})
				if err != nil {
					t.Errorf("increment: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	got, err := cms.Get(ctx, "counter", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Data["n"] != strconv.Itoa(workers*each) {
		t.Errorf("counter %s, want %d", got.Data["n"], workers*each)
	}
	if others.Load() != 0 {
		t.Errorf("%d errors other than 409 Conflict", others.Load())
	}
	t.Logf("%d conflicts retried", conflicts.Load())
}

// TestLeaderElection: two client-go leader-election candidates on one
// coordination.k8s.io Lease: one leads; when it steps down the other takes
// over.
func TestLeaderElection(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	started := make(chan string, 4)
	run := func(ctx context.Context, id string) {
		lock := &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: "test-election", Namespace: "default"},
			Client:     e.client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		}
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock: lock, ReleaseOnCancel: true,
			LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) { started <- id },
				OnStoppedLeading: func() {},
			},
		})
	}
	ctxA, cancelA := context.WithCancel(ctx)
	ctxB, cancelB := context.WithCancel(ctx)
	defer cancelB()
	go run(ctxA, "a")
	first := waitLeader(t, started)
	go run(ctxB, "b")
	if first != "a" {
		t.Fatalf("first leader %q, want a", first)
	}
	l, err := e.client.CoordinationV1().Leases("default").Get(ctx, "test-election", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "a" {
		t.Fatalf("lease after a leads: %v %+v", err, l)
	}
	cancelA() // a releases the lease on cancel
	if second := waitLeader(t, started); second != "b" {
		t.Fatalf("after a stepped down, %q leads, want b", second)
	}
	var cur *coordinationv1.Lease
	cur, err = e.client.CoordinationV1().Leases("default").Get(ctx, "test-election", metav1.GetOptions{})
	if err != nil || *cur.Spec.HolderIdentity != "b" {
		t.Errorf("lease holder %v, want b", cur.Spec.HolderIdentity)
	}
}

func waitLeader(t *testing.T, started <-chan string) string {
	t.Helper()
	select {
	case id := <-started:
		return id
	case <-time.After(30 * time.Second):
		t.Fatal("nobody became leader within 30s")
	}
	return ""
}

// TestNoUpdateLostToAnotherWriter: the gateway patches an object while
// another writer changes it straight in the store (as another gateway
// would), each adding keys of its own. The gateway's patches start from
// the object it last wrote when it can (its update hints), so this checks
// that such a start never overwrites a change it did not see: in the end
// every key of both writers is there.
func TestNoUpdateLostToAnotherWriter(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cms := e.client.CoreV1().ConfigMaps("default")
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "mix"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err := codec.New()
	if err != nil {
		t.Fatal(err)
	}
	kv := storev1.NewKVServiceClient(e.storeConn(gatewayCert))
	key := []byte("/registry/configmaps/default/mix")
	const n = 100
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range n {
			// The other writer is faster and may win every race of a
			// patch's retries: a 409 is tried again, as clients do.
			patch := fmt.Sprintf(`{"data":{"g-%d":"x"}}`, i)
			err := retry.OnError(retry.DefaultRetry, apierrors.IsConflict, func() error {
				_, err := cms.Patch(ctx, "mix", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
				return err
			})
			if err != nil {
				t.Errorf("patch %d: %v", i, err)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := 0; i < n; {
			r, err := kv.Range(ctx, &storev1.RangeRequest{Key: key})
			if err != nil || len(r.Kvs) != 1 {
				t.Errorf("read: %v %v", err, r)
				return
			}
			var cm corev1.ConfigMap
			if err := c.DecodeStorage(r.Kvs[0].Value, r.Kvs[0].ModRevision, &cm); err != nil {
				t.Error(err)
				return
			}
			if cm.Data == nil {
				cm.Data = map[string]string{}
			}
			cm.Data[fmt.Sprintf("s-%d", i)] = "y"
			v, err := c.EncodeStorage(&cm)
			if err != nil {
				t.Error(err)
				return
			}
			resp, err := kv.Txn(ctx, &storev1.TxnRequest{
				Compare: []*storev1.Compare{{Key: key, Target: storev1.Compare_TARGET_MOD, Result: storev1.Compare_RESULT_EQUAL,
					TargetUnion: &storev1.Compare_ModRevision{ModRevision: r.Kvs[0].ModRevision}}},
				Success: []*storev1.RequestOp{{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{Key: key, Value: v}}}},
			})
			if err != nil {
				t.Errorf("write: %v", err)
				return
			}
			if resp.Succeeded {
				i++
				// Paced, so that the gateway's patches also land right
				// after a write of this one, while its hint is outdated.
				time.Sleep(2 * time.Millisecond)
			}
		}
	}()
	wg.Wait()
	cm, err := cms.Get(ctx, "mix", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		for _, k := range []string{fmt.Sprintf("g-%d", i), fmt.Sprintf("s-%d", i)} {
			if _, ok := cm.Data[k]; !ok {
				t.Errorf("key %s was lost", k)
			}
		}
	}
}
