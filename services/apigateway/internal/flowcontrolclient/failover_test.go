package flowcontrolclient

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	"github.com/meridian-cp/meridian/lib/flowcontrol/apf"
	"github.com/meridian-cp/meridian/lib/grpcclient"
	"github.com/meridian-cp/meridian/lib/kube/codec"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/polltest"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	storeapp "github.com/meridian-cp/meridian/services/store/app"
	storeclient "github.com/meridian-cp/meridian/services/store/client"
	"github.com/meridian-cp/meridian/services/store/storetest"
)

// replicaProc is one flowcontrol process.
type replicaProc struct {
	addr string
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan struct{}
}

// buildFlowControl builds the flowcontrol binary into a temporary
// directory.
func buildFlowControl(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "flowcontrol")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/flowcontrol")
	cmd.Dir = filepath.Join("..", "..", "..", "flowcontrol")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build flowcontrol: %v\n%s", err, out)
	}
	return bin
}

// startReplica starts a flowcontrol replica serving on addr, electing its
// leader through the store at storeAddr, plaintext, with a short lease.
func startReplica(t *testing.T, bin, storeAddr, addr string) *replicaProc {
	t.Helper()
	r := &replicaProc{addr: addr, out: &bytes.Buffer{}, done: make(chan struct{})}
	r.cmd = exec.Command(bin,
		"--listen", r.addr, "--metrics-listen", "", "--store-address", storeAddr,
		"--leader-elect", "--advertise-address", r.addr,
		"--leader-elect-lease-duration", "2s", "--leader-elect-renew-deadline", "1500ms", "--leader-elect-retry-period", "200ms",
		"--concurrency-limit", "600", "--log-level", "warn")
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.cmd.Wait(); close(r.done) }()
	t.Cleanup(func() {
		r.kill()
		if t.Failed() {
			t.Logf("replica %s:\n%s", r.addr, r.out)
		}
	})
	return r
}

// kill ends the process at once (SIGKILL): nothing is handed over.
func (r *replicaProc) kill() {
	_ = r.cmd.Process.Kill()
	<-r.done
}

// holder returns the Lease's holderIdentity; "" when there is none.
func holder(ctx context.Context, kv storev1.KVServiceClient) string {
	key := registry.Leases().Key("kube-system", "meridian-flowcontrol")
	resp, err := kv.Range(ctx, &storev1.RangeRequest{Key: []byte(key)})
	if err != nil || len(resp.GetKvs()) == 0 {
		return ""
	}
	c, err := codec.New()
	if err != nil {
		return ""
	}
	var l coordinationv1.Lease
	if err := c.DecodeStorage(resp.GetKvs()[0].GetValue(), 0, &l); err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func aliceDigest() *flowcontrolv1.RequestDigest {
	return &flowcontrolv1.RequestDigest{
		User: "alice", Groups: []string{"system:authenticated"}, Verb: "get",
		Resource: "configmaps", Namespace: "default", Name: "x", IsResourceRequest: true,
	}
}

// TestLeaderKilledUnderLoad: three flowcontrol processes elect a leader
// through the store; a gateway's client, given all three, serves a
// steady load through the leader. The leader is killed (SIGKILL): every
// request still gets a decision (a grant from a replica, or one of the
// gateway's fallback limiter while no replica leads), the client moves to
// the new leader and re-registers there the grant of a request that ran
// across the change, which the new leader then counts (one seat) until
// that request ends; once it has, the new leader holds no seat. The
// decisions go on the replicas' Decide streams.
// Then the other two are killed: the fallback limiter limits — a second
// request of a one-seat level waits for the first.
func TestLeaderKilledUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs flowcontrol processes")
	}
	member := storetest.Start(t, storeapp.Config{ID: "store-0"})
	st, err := storeclient.Dial([]string{member.Addr}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	bin := buildFlowControl(t)

	procs := map[string]*replicaProc{}
	var replicas []Replica
	for _, addr := range daemontest.FreeAddrs(t, 3) {
		p := startReplica(t, bin, member.Addr, addr)
		procs[p.addr] = p
		conn, err := grpcclient.Dial(p.addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		replicas = append(replicas, Replica{Address: p.addr, Client: flowcontrolv1.NewFlowControlServiceClient(conn), Conn: conn})
	}
	log := slog.New(slog.DiscardHandler)
	c := NewReplicas(replicas, "gw-1", log)
	// The fallback: one seat per limited level, so that its limiting
	// shows at once.
	fallback, err := apf.New(apf.Config{ServerConcurrencyLimit: 1, BorrowingPeriod: -1, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fallback.Close() })
	c.SetFallback(fallback)
	runCtx, stopRun := context.WithCancel(context.Background())
	running := make(chan struct{})
	go func() { defer close(running); c.Run(runCtx) }()
	defer func() { stopRun(); <-running }()

	ctx := t.Context()
	var first string
	polltest.Until(t, 30*time.Second, "a leader", func() bool { first = holder(ctx, st.KV()); return first != "" })
	polltest.Until(t, 10*time.Second, "the client reaches the leader", func() bool {
		_, err := c.Dump(ctx)
		return err == nil
	})

	// The load: 8 workers, each request held 2ms.
	var granted, rejected, failed atomic.Int64
	var lastErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				g, err := c.Acquire(rctx, aliceDigest())
				cancel()
				switch {
				case err == nil:
					granted.Add(1)
					time.Sleep(2 * time.Millisecond)
					g.Release()
				case apierrors.IsTooManyRequests(err):
					rejected.Add(1)
				default:
					failed.Add(1)
					lastErr.Store(fmt.Errorf("worker %d: %w", w, err))
				}
			}
		}()
	}
	polltest.Until(t, 10*time.Second, "load through the leader", func() bool { return granted.Load() > 200 })
	if c.streaming() == 0 {
		t.Fatal("the decisions were not made on a Decide stream")
	}
	beforeFallback := fallbackDispatched(fallback)
	// A request that runs across the leader change.
	across, err := c.Acquire(ctx, aliceDigest())
	if err != nil {
		t.Fatal(err)
	}

	killed := time.Now()
	procs[first].kill()
	var second string
	polltest.Until(t, 30*time.Second, "a new leader", func() bool {
		second = holder(ctx, st.KV())
		return second != "" && second != first
	})
	tookOver := time.Since(killed)
	// The client serves through the new leader: its Dump shows requests.
	atSwitch := granted.Load()
	polltest.Until(t, 30*time.Second, "load through the new leader", func() bool {
		d, err := c.Dump(ctx)
		return err == nil && dispatched(d) > 100 && granted.Load() > atSwitch+200
	})
	if c.streaming() == 0 {
		t.Fatal("the decisions through the new leader were not made on a Decide stream")
	}
	close(stop)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d requests got no decision; last: %v", n, lastErr.Load())
	}
	t.Logf("leader %s killed; %s took the lease after %s; %d granted, %d rejected, %d decided by the fallback",
		first, second, tookOver.Round(10*time.Millisecond), granted.Load(), rejected.Load(), fallbackDispatched(fallback)-beforeFallback)

	// The new leader counts the request that ran across the change, and
	// nothing else once the load has ended.
	polltest.Until(t, 30*time.Second, "the new leader holds the seat of the request running across the change", func() bool {
		d, err := c.Dump(ctx)
		if err != nil {
			return false
		}
		var seats, executing uint32
		for _, l := range d.GetPriorityLevels() {
			seats += l.GetSeatsInUse()
			executing += l.GetExecuting()
			if l.GetWaiting() != 0 {
				return false
			}
		}
		return seats == 1 && executing == 1
	})
	t.Logf("the request running across the change counted by the new leader %s after the kill", time.Since(killed).Round(10*time.Millisecond))
	across.Release()
	// No seat leaked on the new leader once every request has ended and
	// its release has been sent.
	polltest.Until(t, 30*time.Second, "the new leader holds no seat", func() bool {
		d, err := c.Dump(ctx)
		if err != nil {
			return false
		}
		for _, l := range d.GetPriorityLevels() {
			if l.GetSeatsInUse() != 0 || l.GetExecuting() != 0 || l.GetWaiting() != 0 {
				return false
			}
		}
		return true
	})
	if st, _ := fallback.LevelStats(apf.LevelGlobalDefault); st.SeatsInUse != 0 {
		t.Fatalf("the fallback holds %d seats after the load", st.SeatsInUse)
	}

	// Every replica killed: the fallback limits, it does not open wide.
	for _, p := range procs {
		p.kill()
	}
	held, err := c.Acquire(ctx, aliceDigest())
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := fallback.LevelStats(apf.LevelGlobalDefault); st.SeatsInUse != 1 {
		t.Fatalf("with every replica down, the fallback holds %d seats, want 1", st.SeatsInUse)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = c.Acquire(wctx, aliceDigest())
	cancel()
	if !apierrors.IsTimeout(err) {
		t.Fatalf("a second request of a one-seat level, with every replica down: %v, want it to wait (timeout)", err)
	}
	held.Release()
	g, err := c.Acquire(ctx, aliceDigest())
	if err != nil {
		t.Fatalf("after the seat was released: %v", err)
	}
	g.Release()
	if st, _ := fallback.LevelStats(apf.LevelGlobalDefault); st.SeatsInUse != 0 {
		t.Fatalf("the fallback holds %d seats at the end", st.SeatsInUse)
	}
}

// dispatched adds up the requests dispatched by every level of d.
func dispatched(d *flowcontrolv1.DumpResponse) uint64 {
	var n uint64
	for _, l := range d.GetPriorityLevels() {
		n += l.GetDispatched()
	}
	return n
}

// fallbackDispatched is the requests the fallback limiter dispatched.
func fallbackDispatched(c *apf.Controller) uint64 {
	var n uint64
	for _, l := range c.Dump() {
		n += l.Dispatched
	}
	return n
}
