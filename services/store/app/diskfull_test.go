package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	"github.com/meridian-cp/meridian/lib/telemetry/telemetrytest"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/disk"
	"github.com/meridian-cp/meridian/services/store/internal/wire"
)

// ack is an acknowledged single-put write.
type ack struct {
	key, value string
	rev        int64
}

// checkConsistent checks the store behind m against the acknowledged
// writes: the history (a watch from revision 1) has an event at every
// revision up to the current one, in order; replaying it gives exactly the
// current state (keys, values, create/mod revisions, versions); every
// acknowledged write is in it at its revision. It returns the current
// revision. Only for stores written with single-op transactions and never
// compacted above revision 1.
func checkConsistent(t *testing.T, m *member, acked []ack) int64 {
	t.Helper()
	cur := m.rng(t, &storev1.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	rev := cur.GetHeader().GetRevision()
	evs := watchEvents(t, m, &storev1.WatchCreateRequest{Key: []byte{0}, RangeEnd: []byte{0}, StartRevision: 1}, int(rev))
	state := map[string]*storev1.KeyValue{}
	at := map[int64]*storev1.Event{}
	last := int64(0)
	for _, ev := range evs {
		r := ev.GetKv().GetModRevision()
		if r != last+1 {
			t.Fatalf("history: event at revision %d after %d", r, last)
		}
		last = r
		at[r] = ev
		if ev.GetType() == storev1.Event_TYPE_DELETE {
			delete(state, string(ev.GetKv().GetKey()))
		} else {
			state[string(ev.GetKv().GetKey())] = ev.GetKv()
		}
	}
	if last != rev {
		t.Fatalf("history ends at revision %d, state is at %d", last, rev)
	}
	if len(state) != len(cur.GetKvs()) {
		t.Fatalf("replayed history has %d keys, the state %d", len(state), len(cur.GetKvs()))
	}
	for _, kv := range cur.GetKvs() {
		want := state[string(kv.GetKey())]
		if want == nil || !bytes.Equal(want.GetValue(), kv.GetValue()) || want.GetModRevision() != kv.GetModRevision() ||
			want.GetCreateRevision() != kv.GetCreateRevision() || want.GetVersion() != kv.GetVersion() {
			t.Fatalf("state of %q is %v, history says %v", kv.GetKey(), kv, want)
		}
	}
	for _, a := range acked {
		ev := at[a.rev]
		if ev == nil || string(ev.GetKv().GetKey()) != a.key || string(ev.GetKv().GetValue()) != a.value {
			t.Fatalf("acknowledged write of %q at revision %d is not in the history (found %v)", a.key, a.rev, ev)
		}
	}
	return rev
}

// wantNoSpace checks that a put, a delete and a lease grant are refused
// with RESOURCE_EXHAUSTED, a message containing msg, and the NOT_PROPOSED
// detail.
func wantNoSpace(t *testing.T, m *member, msg string) {
	t.Helper()
	ctx := context.Background()
	del := &storev1.RequestOp{Request: &storev1.RequestOp_RequestDeleteRange{RequestDeleteRange: &storev1.DeleteRangeRequest{Key: []byte("k/00")}}}
	for name, call := range map[string]func() error{
		"put": func() error {
			_, err := m.kv.Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{put("refused", "v")}})
			return err
		},
		"delete": func() error {
			_, err := m.kv.Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{del}})
			return err
		},
		"lease grant": func() error {
			_, err := storev1.NewLeaseServiceClient(m.conn).LeaseGrant(ctx, &storev1.LeaseGrantRequest{Ttl: durationpb.New(time.Minute)})
			return err
		},
	} {
		st := status.Convert(call())
		if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), msg) {
			t.Fatalf("%s: %v, want RESOURCE_EXHAUSTED mentioning %q", name, st.Err(), msg)
		}
		notProposed := false
		for _, d := range st.Details() {
			if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetReason() == wire.ReasonNotProposed {
				notProposed = true
			}
		}
		if !notProposed {
			t.Fatalf("%s: no NOT_PROPOSED detail in %v", name, st.Details())
		}
	}
}

// wantReads checks that serializable and linearizable reads, a read-only
// transaction and a watch from revision 1 serve every acknowledged write.
func wantReads(t *testing.T, m *member, acked []ack) {
	t.Helper()
	latest := map[string]string{}
	for _, a := range acked {
		latest[a.key] = a.value
	}
	for _, serializable := range []bool{true, false} {
		resp := m.rng(t, &storev1.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Serializable: serializable})
		if int(resp.GetCount()) != len(latest) {
			t.Fatalf("serializable=%t: %d keys, want %d", serializable, resp.GetCount(), len(latest))
		}
		for _, kv := range resp.GetKvs() {
			if latest[string(kv.GetKey())] != string(kv.GetValue()) {
				t.Fatalf("serializable=%t: %q has a wrong value", serializable, kv.GetKey())
			}
		}
	}
	rop := &storev1.RequestOp{Request: &storev1.RequestOp_RequestRange{RequestRange: &storev1.RangeRequest{Key: []byte("k/00")}}}
	tr, err := m.kv.Txn(context.Background(), &storev1.TxnRequest{Success: []*storev1.RequestOp{rop}})
	if err != nil || len(tr.GetResponses()) != 1 {
		t.Fatalf("read-only txn: %v, %v", tr, err)
	}
	evs := watchEvents(t, m, &storev1.WatchCreateRequest{Key: []byte{0}, RangeEnd: []byte{0}, StartRevision: 1}, len(acked))
	if got := evs[len(acked)-1].GetKv().GetModRevision(); got != acked[len(acked)-1].rev {
		t.Fatalf("watch: last event at revision %d, want %d", got, acked[len(acked)-1].rev)
	}
}

// TestDiskFullRefusesWritesServesReadsAndRecovers runs a real store (raft,
// pebble, gRPC) on a disk with a byte budget (fakeDisk): below the reserve
// writes are refused up front; an ENOSPC in the middle of an append is
// absorbed by the ballast and latches the refusal; in both cases reads
// and watches keep serving, writes resume without a restart once space
// returns, and the history is complete and consistent, also after a
// restart.
func TestDiskFullRefusesWritesServesReadsAndRecovers(t *testing.T) {
	d := newFakeDisk(1 << 30)
	cfg := testConfig(t)
	cfg.fs, cfg.diskCheckInterval = d, 20*time.Millisecond
	cfg.MinFreeBytes, cfg.BallastBytes = 8<<20, 8<<20
	m := start(t, cfg)
	ballast := filepath.Join(cfg.DataDir, disk.BallastName)
	if _, err := os.Stat(ballast); err != nil {
		t.Fatalf("no ballast: %v", err)
	}
	var acked []ack
	putAck := func(key, val string) error {
		resp, err := m.kv.Txn(context.Background(), &storev1.TxnRequest{Success: []*storev1.RequestOp{put(key, val)}})
		if err == nil {
			acked = append(acked, ack{key, val, resp.GetHeader().GetRevision()})
		}
		return err
	}
	for i := range 10 {
		if err := putAck(fmt.Sprintf("k/%02d", i), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}

	// 1. Free space below the reserve: refused before proposing.
	d.set(4<<20, 0)
	wantNoSpace(t, m, "below the reserve of 8.0 MiB")
	wantReads(t, m, acked)
	if _, err := m.kv.Compact(context.Background(), &storev1.CompactRequest{Revision: 1}); err != nil {
		t.Fatalf("compaction while below the reserve: %v", err)
	}
	h, err := healthpb.NewHealthClient(m.conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health while below the reserve: %v, %v", h, err)
	}

	// 2. Space is back: writes are admitted again (once a reading sees it).
	d.set(1<<30, 0)
	if err := putAck("k/back", "1"); err != nil {
		t.Fatalf("write after space returned: %v", err)
	}

	// 3. statfs says there is room, the disk has 256 KiB: a write hits
	// ENOSPC in the middle of its append. The ballast is released, the
	// write completes and is acknowledged; later writes are refused.
	// statfs stays above the reserve (writes are admitted: 0.25 + 7.875
	// MiB) but, once the ballast's 8 MiB are back and the write that hit
	// ENOSPC took at least the 0.75 MiB the budget lacked, below reserve +
	// ballast (at most 7.5 + 7.875 < 16 MiB), so the background check does
	// not re-create the ballast before the test looks for it. (A margin of
	// 12 MiB counted on the write taking twice its size, as when the raft
	// log shared pebble's WAL; the log's segments are allocated ahead.)
	//
	// The ENOSPC may also hit a write of the store's own after a put was
	// acknowledged (a pebble flush, the raft log's next segment, allocated
	// ahead): the ballast absorbs it all the same, and the next put is
	// the first refused, by the latch.
	d.set(256<<10, 7<<20+7<<17)
	big := strings.Repeat("x", 1<<20)
	for i := 0; !m.app.disk.Full(); i++ {
		if i == 16 {
			t.Fatal("16 MiB written into a 256 KiB budget without an ENOSPC")
		}
		err := putAck(fmt.Sprintf("big/%02d", i), big)
		if err != nil && !(m.app.disk.Full() && status.Code(err) == codes.ResourceExhausted && strings.Contains(err.Error(), "ENOSPC")) {
			t.Fatalf("write %d while the ballast could absorb it: %v", i, err)
		}
	}
	if _, err := os.Stat(ballast); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ballast after the ENOSPC: %v", err)
	}
	wantNoSpace(t, m, "ENOSPC")
	wantReads(t, m, acked)

	// 4. Space is back: the ballast is re-created and writes resume,
	// without a restart.
	d.set(1<<30, 0)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := putAck("k/resumed", "1")
		if err == nil {
			break
		}
		if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline) {
			t.Fatalf("write after space returned: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := os.Stat(ballast); err != nil {
		t.Fatalf("ballast not re-created: %v", err)
	}
	rev := checkConsistent(t, m, acked)

	// 5. Nothing was corrupted: the same after a restart.
	m.stop(t)
	cfg.fs = newFakeDisk(1 << 30)
	m = start(t, cfg)
	if got := checkConsistent(t, m, acked); got != rev {
		t.Fatalf("revision %d after restart, want %d", got, rev)
	}
	if r := m.put(t, "after-restart", "1"); r != rev+1 {
		t.Fatalf("first write after restart at revision %d, want %d", r, rev+1)
	}
}

// childEnv names the control directory of a store run by
// TestDiskFullChild: data/ (the data dir), addr (written by the child
// when it serves), full (while present, the disk fails every write and
// sync with ENOSPC).
const childEnv = "MERIDIAN_STORE_DISKFULL_CHILD"

// TestDiskFullChild is the store process of
// TestDiskFullENOSPCStopsProcessRestartRecovers; it does nothing unless
// started by it.
func TestDiskFullChild(t *testing.T) {
	ctl := os.Getenv(childEnv)
	if ctl == "" {
		t.Skip("runs as a child of TestDiskFullENOSPCStopsProcessRestartRecovers")
	}
	d := newFakeDisk(1 << 40)
	go func() {
		for {
			if _, err := os.Stat(filepath.Join(ctl, "full")); err == nil {
				d.failAll.Store(true)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	cfg := Config{
		DataDir: filepath.Join(ctl, "data"), Bootstrap: true, CompactionRetention: -1,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)), fs: d, BallastBytes: 1 << 20,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	served := daemontest.Serve(t, a)
	if err := os.WriteFile(filepath.Join(ctl, "addr.tmp"), []byte(served.Addr), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(ctl, "addr.tmp"), filepath.Join(ctl, "addr")); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
}

// child is a store process started by startChild.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *telemetrytest.Buffer
	exited chan struct{}
	m      *member
}

func startChild(t *testing.T, ctl string) *child {
	t.Helper()
	_ = os.Remove(filepath.Join(ctl, "addr"))
	c := &child{stderr: &telemetrytest.Buffer{}, exited: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^TestDiskFullChild$", "-test.count=1")
	c.cmd.Env = append(os.Environ(), childEnv+"="+ctl)
	c.cmd.Stderr, c.cmd.Stdout = c.stderr, c.stderr
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.cmd.Wait(); close(c.exited) }()
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		<-c.exited
	})
	deadline := time.Now().Add(60 * time.Second)
	var addr []byte
	for {
		if addr, err = os.ReadFile(filepath.Join(ctl, "addr")); err == nil {
			break
		}
		select {
		case <-c.exited:
			t.Fatalf("store process exited at start:\n%s", c.stderr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("store process not serving:\n%s", c.stderr)
		}
	}
	conn, err := grpc.NewClient(string(addr), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c.m = &member{conn: conn, kv: storev1.NewKVServiceClient(conn), watch: storev1.NewWatchServiceClient(conn),
		maint: storev1.NewMaintenanceServiceClient(conn)}
	return c
}

// TestDiskFullENOSPCStopsProcessRestartRecovers: when ENOSPC cannot be
// absorbed (every write and fsync fails, the ballast frees nothing), the
// fatal write error (pebble's commit, or the raft log's append) stops the
// store process; no write is
// acknowledged on the full disk, and once space is freed a restart serves
// every acknowledged write with a complete, consistent history and takes
// new writes.
func TestDiskFullENOSPCStopsProcessRestartRecovers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts store processes")
	}
	ctl := t.TempDir()
	c := startChild(t, ctl)
	var acked []ack
	for i := range 20 {
		key, val := fmt.Sprintf("k/%02d", i), fmt.Sprint(i)
		acked = append(acked, ack{key, val, c.m.put(t, key, val)})
	}

	if err := os.WriteFile(filepath.Join(ctl, "full"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the child polls every 5ms
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := c.m.kv.Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{put(fmt.Sprintf("full/%02d", i), "v")}})
		cancel()
		if err == nil {
			t.Fatalf("write %d acknowledged while every write and fsync fails", i)
		}
		select {
		case <-c.exited:
		case <-time.After(50 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatalf("store process still running on a full disk (last error %v):\n%s", err, c.stderr)
			}
			continue
		}
		break
	}
	if c.cmd.ProcessState.Success() {
		t.Fatalf("store process exited successfully on a full disk:\n%s", c.stderr)
	}
	out := c.stderr.String()
	// Whichever writes first stops the process: pebble's WAL (the state
	// machine, the stable store) or the raft log (package raftwal).
	if !strings.Contains(out, "pebble: fatal commit error") && !strings.Contains(out, "raft log write failed; stopping") || !strings.Contains(out, "no space left on device") {
		t.Fatalf("store process did not stop on a fatal write error:\n%s", out)
	}

	// Space is freed; the restarted store lost nothing and corrupted
	// nothing. Writes refused on the full disk may or may not be in the
	// history (their outcome was unknown); checkConsistent requires only
	// the acknowledged ones.
	if err := os.Remove(filepath.Join(ctl, "full")); err != nil {
		t.Fatal(err)
	}
	c = startChild(t, ctl)
	rev := checkConsistent(t, c.m, acked)
	if r := c.m.put(t, "after-restart", "1"); r != rev+1 {
		t.Fatalf("first write after restart at revision %d, want %d", r, rev+1)
	}
	if err := c.stdin.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("store process did not stop")
	}
	if !c.cmd.ProcessState.Success() {
		t.Fatalf("store process failed to stop cleanly:\n%s", c.stderr)
	}
}
