package server

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/fsm"
	"github.com/meridian-cp/meridian/services/store/internal/mvcc"
	"github.com/meridian-cp/meridian/services/store/internal/raftnode"
	"github.com/meridian-cp/meridian/services/store/internal/watch"
)

// leaderlessServer returns a Server over a real member (pebble, MVCC,
// FSM, raft) that never has a leader: raft starts without a configuration
// and is not bootstrapped, so every read barrier and every forwarded
// request waits for a leader that never comes.
func leaderlessServer(t *testing.T, limits mvcc.Limits) *Server {
	t.Helper()
	dir := t.TempDir()
	db, err := pebble.Open(filepath.Join(dir, "db"), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := mvcc.Open(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	hub, err := watch.New(store, store.Rev(), watch.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	f, err := fsm.New(store, hub, fsm.Options{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	node, err := raftnode.Start(raftnode.Config{
		ID: "s0", DB: db, FSM: f, Logger: log,
		LogDir: filepath.Join(dir, "raft"), SnapshotDir: filepath.Join(dir, "snapshots"),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := New(Config{Node: node, KV: store, Watches: hub, Limits: limits, Logger: log})
	t.Cleanup(func() {
		srv.Close()
		_ = node.Shutdown()
		hub.Close()
		_ = db.Close()
	})
	return srv
}

// TestBadInputIsRefusedBeforeTheReadBarrier: the server validates a Range
// or a Txn once, before any read barrier, forwarding or proposal. On a
// member without a leader, where each of those waits, bad input is
// INVALID_ARGUMENT, for serializable and linearizable reads alike, while
// a valid linearizable read does wait for a leader.
func TestBadInputIsRefusedBeforeTheReadBarrier(t *testing.T) {
	s := leaderlessServer(t, mvcc.Limits{MaxValueBytes: 16, MaxRequestBytes: 1024})
	kv := &kvServer{s: s}
	ctx := t.Context()

	for _, c := range []struct {
		name string
		req  *storev1.RangeRequest
	}{
		{"empty key", &storev1.RangeRequest{}},
		{"range end below key", &storev1.RangeRequest{Key: []byte("b"), RangeEnd: []byte("a")}},
		{"range end equal to key", &storev1.RangeRequest{Key: []byte("b"), RangeEnd: []byte("b")}},
		{"negative limit", &storev1.RangeRequest{Key: []byte("b"), Limit: -1}},
		{"negative revision", &storev1.RangeRequest{Key: []byte("b"), Revision: -1}},
	} {
		for _, serializable := range []bool{false, true} {
			req := proto.CloneOf(c.req)
			req.Serializable = serializable
			if _, err := kv.Range(ctx, req); status.Code(err) != codes.InvalidArgument {
				t.Errorf("Range %s (serializable %v): %v, want InvalidArgument", c.name, serializable, err)
			}
		}
	}

	put := func(key, value string) *storev1.RequestOp {
		return &storev1.RequestOp{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{Key: []byte(key), Value: []byte(value)}}}
	}
	rng := func(key, end string) *storev1.RequestOp {
		return &storev1.RequestOp{Request: &storev1.RequestOp_RequestRange{RequestRange: &storev1.RangeRequest{Key: []byte(key), RangeEnd: []byte(end)}}}
	}
	for name, req := range map[string]*storev1.TxnRequest{
		"put of an empty key":            {Success: []*storev1.RequestOp{put("", "v")}},
		"a key put twice":                {Success: []*storev1.RequestOp{put("d", "1"), put("d", "2")}},
		"compare without a key":          {Compare: []*storev1.Compare{{Target: storev1.Compare_TARGET_VERSION}}},
		"value above the limit":          {Success: []*storev1.RequestOp{put("big", strings.Repeat("x", 17))}},
		"read-only, bad range":           {Success: []*storev1.RequestOp{rng("b", "a")}},
		"read-only, bad range (failure)": {Failure: []*storev1.RequestOp{rng("", "")}},
	} {
		if _, err := kv.Txn(ctx, req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("Txn %s: %v, want InvalidArgument", name, err)
		}
	}

	// The member itself serves: a valid serializable read is local...
	if _, err := kv.Range(ctx, &storev1.RangeRequest{Key: []byte("b"), Serializable: true}); err != nil {
		t.Fatalf("serializable Range without a leader: %v", err)
	}
	// ...and a valid linearizable one waits for a leader, which never
	// comes: what the bad requests above would have met after a barrier.
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := kv.Range(wctx, &storev1.RangeRequest{Key: []byte("b")}); err == nil || status.Code(err) == codes.InvalidArgument {
		t.Fatalf("linearizable Range without a leader: %v, want it to wait for one", err)
	}
}
