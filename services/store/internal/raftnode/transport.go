package raftnode

import (
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// transportTimeout bounds each raft RPC's I/O on the network transport.
const transportTimeout = 10 * time.Second

// transportPool is how many idle connections the transport keeps per peer.
const transportPool = 3

// raft's replication sends one AppendEntries at a time per follower: the
// transport refuses raft's pipelined replication
// (trackedTransport.AppendEntriesPipeline). The pipeline (hashicorp/raft
// v1.8.0) can deadlock: when a follower answers an AppendEntries with
// success=false, raft's decoding goroutine stops reading responses while
// its sending loop may send one more request, which waits forever for room
// — the leader never replicates to that follower again, though its
// heartbeats go on (hashicorp/raft#612), and raft's Shutdown waits forever
// for the stuck goroutine: a store member that had led hung in Close with
// this stack in the watchfanout's exactly-once test under load. Without
// the pipeline each request carries every entry that is ready (up to
// MaxAppendEntries), so the group commit is kept. The commit notices use
// the transport's pipeline themselves (notice.go), reading every answer
// until they close it, so they never stop reading.

// newTransport returns the raft transport for cfg.
//
// Without a PeerAddress the node uses raft's in-memory transport with the
// address "inmem:<id>": a single-node group needs no network, and nothing
// listens. With one, it uses raft's NetworkTransport, bound to PeerAddress
// and advertising PeerAdvertise (default PeerAddress), which must therefore
// name a concrete IP and a non-zero port. With ServerTLS set the stream layer is TLS in both
// directions (mutual when ServerTLS requires client certificates and
// ClientTLS carries one); otherwise plain TCP, for tests.
// The address is stored in the raft configuration: switching a data
// directory from one transport to the other needs a membership change.
func newTransport(cfg Config, hl hclog.Logger) (raft.Transport, error) {
	if cfg.PeerAddress == "" {
		_, t := raft.NewInmemTransport(raft.ServerAddress("inmem:" + cfg.ID))
		return t, nil
	}
	bind, err := ValidatePeerAddress(cfg.PeerAddress)
	if err != nil {
		return nil, err
	}
	var advertise net.Addr = bind
	if cfg.PeerAdvertise != "" {
		if err := CheckPeerAddress(cfg.PeerAdvertise); err != nil {
			return nil, err
		}
		advertise = peerName(cfg.PeerAdvertise)
	}
	if cfg.ServerTLS != nil && cfg.ClientTLS == nil {
		return nil, fmt.Errorf("raftnode: a TLS raft transport needs ClientTLS to dial peers")
	}
	lis, err := net.Listen("tcp", cfg.PeerAddress)
	if err != nil {
		return nil, fmt.Errorf("raftnode: raft transport on %s: %w", cfg.PeerAddress, err)
	}
	sl := &streamLayer{Listener: lis, advertise: advertise, client: cfg.ClientTLS,
		local: &net.TCPAddr{IP: bind.IP}, conns: map[*layerConn]struct{}{}}
	if cfg.ServerTLS != nil {
		sl.Listener = tls.NewListener(lis, cfg.ServerTLS)
	}
	return &trackedTransport{NetworkTransport: raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: sl, MaxPool: transportPool, Timeout: transportTimeout, Logger: hl.Named("transport"),
		MaxRPCsInFlight: noticePipelineDepth,
	}), followers: map[raft.ServerID]*replication{}}, nil
}

// trackedTransport is raft's network transport, knowing which followers
// have an AppendEntries carrying entries in flight and up to which index:
// raft's replication to such a follower waits for that answer, and a
// commit notice (notice.go) to it starts after the entries it carries.
// Heartbeats carry no entries, and notices are sent past it, so neither
// is counted.
type trackedTransport struct {
	*raft.NetworkTransport

	// node is set once the Node exists; until then no answer is
	// noticed (acknotice.go).
	node atomic.Pointer[Node]

	mu        sync.Mutex
	followers map[raft.ServerID]*replication
}

// replication is what trackedTransport knows of raft's replication to one
// follower.
type replication struct {
	inFlight int    // AppendEntries with entries in flight
	last     uint64 // the highest index they carry
	// acked is the highest index an AppendEntries with entries carried
	// that the follower accepted: it holds every entry up to there.
	acked uint64
	// ackedTerm is the term of the AppendEntries that raised acked last.
	// A follower's log matches this leader's up to acked only while the
	// leader of ackedTerm leads: a later one may have cut it back.
	ackedTerm uint64
}

// AppendEntries sends an AppendEntries, counting it while it is in flight
// when it carries entries. The answer to one that carries entries goes to
// the node's commit notices at the acknowledgement (acknotice.go) before
// it returns to raft.
func (t *trackedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if len(args.Entries) == 0 {
		return t.NetworkTransport.AppendEntries(id, target, args, resp)
	}
	last := args.Entries[len(args.Entries)-1].Index
	t.mu.Lock()
	f := t.followers[id]
	if f == nil {
		f = &replication{}
		t.followers[id] = f
	}
	f.inFlight++
	f.last = max(f.last, last)
	t.mu.Unlock()
	err := t.NetworkTransport.AppendEntries(id, target, args, resp)
	ok := err == nil && resp.Success
	t.mu.Lock()
	f.inFlight--
	if ok {
		if args.Term != f.ackedTerm {
			f.acked, f.ackedTerm = 0, args.Term
		}
		f.acked = max(f.acked, last)
	}
	t.mu.Unlock()
	if n := t.node.Load(); ok && n != nil {
		n.noticeAcked(args.Term, last)
	}
	return err
}

// AppendEntriesPipeline refuses raft's pipelined replication (see the
// top of this file): raft then sends one AppendEntries at a time.
func (t *trackedTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

// replicationTo reports what raft's replication to id is doing: whether an
// AppendEntries with entries is in flight (busy) and the highest index
// those carry (last), and the highest index the follower acknowledged
// (acked).
func (t *trackedTransport) replicationTo(id raft.ServerID) (last, acked uint64, busy bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.followers[id]
	if f == nil {
		return 0, 0, false
	}
	return f.last, f.acked, f.inFlight > 0
}

// ackedInTerm is the highest index follower id accepted in an
// AppendEntries with entries of term (0 for none).
func (t *trackedTransport) ackedInTerm(id raft.ServerID, term uint64) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f := t.followers[id]; f != nil && f.ackedTerm == term {
		return f.acked
	}
	return 0
}

// streamLayer is a raft.StreamLayer over TCP, with TLS when client is set.
// Accepted TLS connections complete their handshake on first read (in the
// transport's per-connection goroutine), so a slow or hostile peer never
// blocks Accept. Outgoing connections are bound to the IP of the listen
// address, so that peers (and test proxies) see which member dials.
//
// The layer owns every connection it accepts or dials until that
// connection is closed, and Close closes them all with the listener:
// raft's NetworkTransport closes only its listener on Close, while its
// handlers of accepted connections wait in a read for as long as the
// peer keeps the connection (its pool keeps it idle), and its own pooled
// connections stay open, which the peers' handlers then wait on — a
// stopped member would hold sockets and goroutines, its own and its
// peers', for as long as the process runs.
type streamLayer struct {
	net.Listener
	advertise net.Addr
	client    *tls.Config
	local     *net.TCPAddr

	// mu guards conns (the open connections) and closed (set by Close;
	// a connection made after it is closed at once).
	mu     sync.Mutex
	conns  map[*layerConn]struct{}
	closed bool
}

// Addr returns the advertised address.
func (l *streamLayer) Addr() net.Addr { return l.advertise }

// Accept waits for a peer's connection.
func (l *streamLayer) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.own(c)
}

// Dial opens a connection to a peer. Without a ServerName in the client
// config, the peer's certificate is verified against the dialled host.
func (l *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout, LocalAddr: l.local}
	if l.client == nil {
		c, err := d.Dial("tcp", string(address))
		if err != nil {
			return nil, err
		}
		return l.own(c)
	}
	cfg := l.client.Clone()
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(string(address))
		if err != nil {
			return nil, fmt.Errorf("raftnode: peer address %q: %w", address, err)
		}
		cfg.ServerName = host
	}
	c, err := tls.DialWithDialer(d, "tcp", string(address), cfg)
	if err != nil {
		return nil, err
	}
	return l.own(c)
}

// Close closes the listener and every open connection of the layer.
func (l *streamLayer) Close() error {
	err := l.Listener.Close()
	l.mu.Lock()
	l.closed = true
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
	return err
}

// own registers c as open, or closes it when the layer is closed.
func (l *streamLayer) own(c net.Conn) (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		_ = c.Close()
		return nil, fmt.Errorf("raftnode: raft transport closed: %w", net.ErrClosed)
	}
	lc := &layerConn{Conn: c, l: l}
	l.conns[lc] = struct{}{}
	return lc, nil
}

// layerConn is a connection of a streamLayer: closing it forgets it.
type layerConn struct {
	net.Conn
	l *streamLayer
}

func (c *layerConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// peerName is an advertised raft address as given (a DNS name is kept,
// not resolved: raft stores it and peers dial it).
type peerName string

func (a peerName) Network() string { return "tcp" }
func (a peerName) String() string  { return string(a) }

// CheckPeerAddress checks that a raft address can be advertised and kept
// in the raft configuration: host:port with a non-zero port, and a
// concrete IP when the host is one. A DNS name is not resolved: when the
// members of a StatefulSet start in parallel a peer's name is published
// only once its pod exists, and raft dials the name again on every
// heartbeat and vote until it answers, so a member must not refuse to
// start over a name that does not resolve yet.
func CheckPeerAddress(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("raftnode: peer address %q: %w", a, err)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Errorf("raftnode: peer address %q must have a non-zero port (it is advertised to peers)", a)
	}
	if host == "" {
		return fmt.Errorf("raftnode: peer address %q has no host (it is advertised to peers)", a)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("raftnode: peer address %q must have a concrete IP and a non-zero port (it is advertised to peers)", a)
	}
	return nil
}

// ValidatePeerAddress checks that a raft TCP address can be bound and
// advertised: it resolves to an IP (not unspecified) and has a non-zero
// port. It is for this member's own bind address; peers' addresses are
// checked with CheckPeerAddress.
func ValidatePeerAddress(a string) (*net.TCPAddr, error) {
	addr, err := net.ResolveTCPAddr("tcp", a)
	if err != nil {
		return nil, fmt.Errorf("raftnode: peer address %q: %w", a, err)
	}
	if addr.Port == 0 || addr.IP == nil || addr.IP.IsUnspecified() {
		return nil, fmt.Errorf("raftnode: peer address %q must have a concrete IP and a non-zero port (it is advertised to peers)", a)
	}
	return addr, nil
}
