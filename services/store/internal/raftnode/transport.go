package raftnode

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// transportTimeout bounds each raft RPC's I/O on the network transport.
const transportTimeout = 10 * time.Second

// transportPool is how many idle connections the transport keeps per peer.
const transportPool = 3

// newTransport returns the raft transport for cfg.
//
// Without a PeerAddress the node uses raft's in-memory transport with the
// address "inmem:<id>": a single-node group needs no network, and nothing
// listens. With one, it uses raft's NetworkTransport, bound to and
// advertising PeerAddress, which must therefore name a concrete IP and a
// non-zero port. With ServerTLS set the stream layer is TLS in both
// directions (mutual when ServerTLS requires client certificates and
// ClientTLS carries one); otherwise plain TCP, for tests.
// The address is stored in the raft configuration: switching a data
// directory from one transport to the other needs a membership change.
func newTransport(cfg Config, hl hclog.Logger) (raft.Transport, error) {
	if cfg.PeerAddress == "" {
		_, t := raft.NewInmemTransport(raft.ServerAddress("inmem:" + cfg.ID))
		return t, nil
	}
	addr, err := ValidatePeerAddress(cfg.PeerAddress)
	if err != nil {
		return nil, err
	}
	if cfg.ServerTLS == nil {
		t, err := raft.NewTCPTransportWithLogger(cfg.PeerAddress, addr, transportPool, transportTimeout, hl.Named("transport"))
		if err != nil {
			return nil, fmt.Errorf("raftnode: raft transport on %s: %w", cfg.PeerAddress, err)
		}
		return t, nil
	}
	if cfg.ClientTLS == nil {
		return nil, fmt.Errorf("raftnode: a TLS raft transport needs ClientTLS to dial peers")
	}
	lis, err := net.Listen("tcp", cfg.PeerAddress)
	if err != nil {
		return nil, fmt.Errorf("raftnode: raft transport on %s: %w", cfg.PeerAddress, err)
	}
	sl := &tlsStreamLayer{Listener: tls.NewListener(lis, cfg.ServerTLS), advertise: addr, client: cfg.ClientTLS}
	return raft.NewNetworkTransportWithLogger(sl, transportPool, transportTimeout, hl.Named("transport")), nil
}

// tlsStreamLayer is a raft.StreamLayer over TLS. Accepted connections
// complete their handshake on first read (in the transport's per-connection
// goroutine), so a slow or hostile peer never blocks Accept.
type tlsStreamLayer struct {
	net.Listener
	advertise net.Addr
	client    *tls.Config
}

// Addr returns the advertised address.
func (l *tlsStreamLayer) Addr() net.Addr { return l.advertise }

// Dial opens a TLS connection to a peer. Without a ServerName in the client
// config, the peer's certificate is verified against the dialled host.
func (l *tlsStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	cfg := l.client.Clone()
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(string(address))
		if err != nil {
			return nil, fmt.Errorf("raftnode: peer address %q: %w", address, err)
		}
		cfg.ServerName = host
	}
	d := &net.Dialer{Timeout: timeout}
	return tls.DialWithDialer(d, "tcp", string(address), cfg)
}

// ValidatePeerAddress checks that a raft TCP address can be advertised: an
// IP (not unspecified) and a non-zero port.
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
