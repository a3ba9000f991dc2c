package raftnode

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
)

// TestReplicationIsNotPipelined: the network transport refuses raft's
// pipelined replication (trackedTransport.AppendEntriesPipeline), so raft replicates
// with one AppendEntries at a time per follower.
func TestReplicationIsNotPipelined(t *testing.T) {
	addr := daemontest.FreeAddrs(t, 1)[0]
	tr, err := newTransport(Config{ID: "n1", PeerAddress: addr}, newHCLog(slog.New(slog.DiscardHandler), "raft"))
	if err != nil {
		t.Fatal(err)
	}
	defer closeTransport(tr)
	if _, err := tr.AppendEntriesPipeline("n2", "127.0.0.1:1"); !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		t.Fatalf("AppendEntriesPipeline: %v, want %v", err, raft.ErrPipelineReplicationNotSupported)
	}
}
