package raftnode

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/fsm"
	"github.com/meridian-cp/meridian/services/store/internal/mvcc"
	"github.com/meridian-cp/meridian/services/store/internal/watch"
)

// member is a real store member on a temporary directory: pebble, the
// MVCC store, the watch hub, the FSM and a Node, as the store wires them
// (without the gRPC server). stop and start reopen the same directory.
type member struct {
	t   *testing.T
	cfg Config // without DB, FSM, LogDir, SnapshotDir and Logger
	dir string

	db   *pebble.DB
	kv   *mvcc.Store
	hub  *watch.Hub
	fsm  *fsm.FSM
	node *Node

	// stall, held by a test, stops the member's state machine at its next
	// publication to the watch hub: raft goes on committing, and hands
	// the FSM nothing more until the test lets go.
	stall sync.RWMutex
}

// stallingPublisher is a member's watch hub behind its stall lock.
type stallingPublisher struct {
	*watch.Hub
	m *member
}

func (p stallingPublisher) Publish(rev int64, events []*storev1.Event) {
	p.m.stall.RLock()
	defer p.m.stall.RUnlock()
	p.Hub.Publish(rev, events)
}

var quiet = slog.New(slog.DiscardHandler)

// newMember starts a member with cfg, stopped at the end of the test.
func newMember(t *testing.T, cfg Config) *member {
	t.Helper()
	m := &member{t: t, cfg: cfg, dir: t.TempDir()}
	m.start()
	t.Cleanup(m.stop)
	return m
}

func (m *member) start() {
	m.t.Helper()
	if err := m.open(); err != nil {
		m.t.Fatalf("start %s: %v", m.cfg.ID, err)
	}
}

// open opens the member's pebble DB, MVCC store, hub and FSM and starts
// its node; when that fails, nothing is left open.
func (m *member) open() (err error) {
	db, err := pebble.Open(filepath.Join(m.dir, "db"), &pebble.Options{})
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = db.Close()
		}
	}()
	kv, err := mvcc.Open(db, nil)
	if err != nil {
		return err
	}
	hub, err := watch.New(kv, kv.Rev(), watch.Options{Logger: quiet})
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			hub.Close()
		}
	}()
	f, err := fsm.New(kv, stallingPublisher{hub, m}, fsm.Options{Logger: quiet})
	if err != nil {
		return err
	}
	cfg := m.cfg
	cfg.DB, cfg.FSM, cfg.Logger = db, f, quiet
	cfg.LogDir, cfg.SnapshotDir = filepath.Join(m.dir, "raft"), filepath.Join(m.dir, "snapshots")
	n, err := Start(cfg)
	if err != nil {
		return err
	}
	m.db, m.kv, m.hub, m.fsm, m.node = db, kv, hub, f, n
	return nil
}

// stop shuts the member down; it can be started again. Safe twice.
func (m *member) stop() {
	if m.node == nil {
		return
	}
	if err := m.node.Shutdown(); err != nil {
		m.t.Errorf("shutdown %s: %v", m.cfg.ID, err)
	}
	m.hub.Close()
	if err := m.db.Close(); err != nil {
		m.t.Errorf("close %s: %v", m.cfg.ID, err)
	}
	m.node = nil
}

// ready waits until the member has a leader and applied what it had
// committed (WaitReady).
func (m *member) ready() {
	m.t.Helper()
	ctx, cancel := context.WithTimeout(m.t.Context(), 30*time.Second)
	defer cancel()
	if err := m.node.WaitReady(ctx); err != nil {
		m.t.Fatalf("%s: %v", m.cfg.ID, err)
	}
}

// fastTimeouts are raft timeouts that elect a leader within about a
// second on loopback, yet keep it on a loaded machine running the race
// detector (a leader change in the middle of a test would make it test
// something else).
func fastTimeouts(cfg *Config) {
	cfg.HeartbeatTimeout, cfg.ElectionTimeout = time.Second, time.Second
}

// single starts a bootstrapped one-member group (in-memory transport) and
// waits until it leads.
func single(t *testing.T, tune func(*Config)) *member {
	t.Helper()
	cfg := Config{ID: "s0", Bootstrap: true}
	fastTimeouts(&cfg)
	if tune != nil {
		tune(&cfg)
	}
	m := newMember(t, cfg)
	m.ready()
	return m
}

// cluster starts n members bootstrapped together over TCP on loopback and
// waits until each is ready.
func cluster(t *testing.T, n int, tune func(*Config)) []*member {
	t.Helper()
	addrs := daemontest.FreeAddrs(t, n)
	var initial []Peer
	for i := range n {
		initial = append(initial, Peer{ID: fmt.Sprintf("s%d", i), Address: addrs[i]})
	}
	ms := make([]*member, n)
	for i := range n {
		cfg := Config{ID: initial[i].ID, PeerAddress: addrs[i], Bootstrap: true, InitialCluster: initial}
		fastTimeouts(&cfg)
		if tune != nil {
			tune(&cfg)
		}
		ms[i] = newMember(t, cfg)
	}
	for _, m := range ms {
		m.ready()
	}
	return ms
}

// leaderOf waits (at most 15s) until one of ms leads and returns it and
// the others.
func leaderOf(t *testing.T, ms []*member) (leader *member, followers []*member) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		leader, followers = nil, nil
		for _, m := range ms {
			if m.node == nil {
				continue
			}
			if m.node.IsLeader() {
				leader = m
			} else {
				followers = append(followers, m)
			}
		}
		if leader != nil {
			return leader, followers
		}
		if time.Now().After(deadline) {
			t.Fatal("no leader within 15s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func putOp(key, value string) *storev1.RequestOp {
	return &storev1.RequestOp{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{Key: []byte(key), Value: []byte(value)}}}
}

// putReq is a transaction that puts key.
func putReq(key, value string) *storev1.TxnRequest {
	return &storev1.TxnRequest{Success: []*storev1.RequestOp{putOp(key, value)}}
}

// put writes key through m's node (the leader) and returns the revision
// and the raft index of the write.
func (m *member) put(ctx context.Context, key, value string) (rev int64, index uint64) {
	m.t.Helper()
	resp, err := m.node.Txn(ctx, putReq(key, value))
	if err != nil {
		m.t.Fatalf("put %s: %v", key, err)
	}
	// Nothing but this write reaches the leader's FSM meanwhile in these
	// tests (no lessor, no compactor), so its applied index is the write's.
	return resp.GetHeader().GetRevision(), m.fsm.AppliedIndex()
}

// get reads key from m's local state.
func (m *member) get(key string) *storev1.KeyValue {
	m.t.Helper()
	resp, err := m.kv.Range(m.t.Context(), &storev1.RangeRequest{Key: []byte(key)})
	if err != nil {
		m.t.Fatal(err)
	}
	if len(resp.GetKvs()) == 0 {
		return nil
	}
	return resp.GetKvs()[0]
}

// entryType returns the type of the entry at index in m's raft log.
func (m *member) entryType(index uint64) raft.LogType {
	m.t.Helper()
	var l raft.Log
	if err := m.node.logs.GetLog(index, &l); err != nil {
		m.t.Fatalf("log entry %d: %v", index, err)
	}
	return l.Type
}
