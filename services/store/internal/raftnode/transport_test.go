package raftnode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

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

// tcpConn is one of the process's TCP sockets (its file descriptor is
// open): local and remote port on loopback, and whether it is a listener.
type tcpConn struct {
	local, remote int
	listen        bool
}

// openTCP returns the TCP sockets the process holds open (/proc/self/fd
// joined with /proc/net/tcp).
func openTCP(t *testing.T) []tcpConn {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	mine := map[string]bool{}
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil {
			if inode, ok := strings.CutPrefix(target, "socket:["); ok {
				mine[strings.TrimSuffix(inode, "]")] = true
			}
		}
	}
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Skipf("no /proc/net/tcp: %v", err)
	}
	port := func(hexAddr string) int {
		_, p, _ := strings.Cut(hexAddr, ":")
		n, _ := strconv.ParseInt(p, 16, 32)
		return int(n)
	}
	var out []tcpConn
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 || !mine[f[9]] {
			continue
		}
		out = append(out, tcpConn{local: port(f[1]), remote: port(f[2]), listen: f[3] == "0A"})
	}
	return out
}

// peerPort is the port of m's raft address.
func peerPort(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// countTCP counts the process's open TCP sockets that match.
func countTCP(t *testing.T, match func(tcpConn) bool) int {
	t.Helper()
	n := 0
	for _, c := range openTCP(t) {
		if match(c) {
			n++
		}
	}
	return n
}

// TestStoppedMemberClosesItsAcceptedConnections: in a 3-member cluster in
// one process, once a follower's Shutdown returns, nothing is open on its
// raft port: neither its listener nor a connection it accepted from its
// peers (which keep theirs pooled; raft's handler of an accepted
// connection would wait in a read for as long as the peer keeps it).
func TestStoppedMemberClosesItsAcceptedConnections(t *testing.T) {
	ms := cluster(t, 3, nil)
	leader, followers := leaderOf(t, ms)
	x := followers[0]
	port := peerPort(t, x.cfg.PeerAddress)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := range 5 {
		if _, err := leader.node.Txn(ctx, putReq(fmt.Sprintf("k%d", i), "v")); err != nil {
			t.Fatal(err)
		}
	}
	onPort := func(c tcpConn) bool { return c.local == port }
	accepted := func(c tcpConn) bool { return c.local == port && !c.listen }
	if n := countTCP(t, accepted); n == 0 {
		t.Fatalf("%s accepted no raft connection while it follows", x.cfg.ID)
	}
	x.stop()
	if n := countTCP(t, onPort); n != 0 {
		t.Fatalf("%d sockets open on %s's raft port after its Shutdown: %v", n, x.cfg.ID, openTCP(t))
	}
}

// TestClosedTransportClosesItsDialledConnections: a transport that sent
// an RPC to a peer keeps the connection pooled; closing the transport
// closes it at once, and the peer's handler, reading the close, ends its
// end too.
func TestClosedTransportClosesItsDialledConnections(t *testing.T) {
	hl := newHCLog(quiet, "raft")
	addrs := daemontest.FreeAddrs(t, 2)
	a, err := newTransport(Config{ID: "a", PeerAddress: addrs[0]}, hl)
	if err != nil {
		t.Fatal(err)
	}
	defer closeTransport(a)
	b, err := newTransport(Config{ID: "b", PeerAddress: addrs[1]}, hl)
	if err != nil {
		t.Fatal(err)
	}
	defer closeTransport(b)
	go func() {
		for rpc := range b.Consumer() {
			rpc.Respond(&raft.RequestVoteResponse{Term: 1}, nil)
		}
	}()
	var resp raft.RequestVoteResponse
	if err := a.RequestVote("b", raft.ServerAddress(addrs[1]), &raft.RequestVoteRequest{Term: 1}, &resp); err != nil {
		t.Fatal(err)
	}
	bPort := peerPort(t, addrs[1])
	dialled := func(c tcpConn) bool { return c.remote == bPort }
	accepted := func(c tcpConn) bool { return c.local == bPort && !c.listen }
	if countTCP(t, dialled) != 1 || countTCP(t, accepted) != 1 {
		t.Fatalf("after one RPC: %v, want one connection from a to b", openTCP(t))
	}
	closeTransport(a)
	if n := countTCP(t, dialled); n != 0 {
		t.Fatalf("%d of a's connections to b open after a was closed", n)
	}
	for deadline := time.Now().Add(10 * time.Second); countTCP(t, accepted) != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("b still serves a's closed connection after 10s: %v", openTCP(t))
		}
	}
}
