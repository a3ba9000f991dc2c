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
	advertise := bind
	if cfg.PeerAdvertise != "" {
		if advertise, err = ValidatePeerAddress(cfg.PeerAdvertise); err != nil {
			return nil, err
		}
	}
	if cfg.ServerTLS != nil && cfg.ClientTLS == nil {
		return nil, fmt.Errorf("raftnode: a TLS raft transport needs ClientTLS to dial peers")
	}
	lis, err := net.Listen("tcp", cfg.PeerAddress)
	if err != nil {
		return nil, fmt.Errorf("raftnode: raft transport on %s: %w", cfg.PeerAddress, err)
	}
	sl := &streamLayer{Listener: lis, advertise: advertise, client: cfg.ClientTLS,
		local: &net.TCPAddr{IP: bind.IP}}
	if cfg.ServerTLS != nil {
		sl.Listener = tls.NewListener(lis, cfg.ServerTLS)
	}
	return raft.NewNetworkTransportWithLogger(sl, transportPool, transportTimeout, hl.Named("transport")), nil
}

// streamLayer is a raft.StreamLayer over TCP, with TLS when client is set.
// Accepted TLS connections complete their handshake on first read (in the
// transport's per-connection goroutine), so a slow or hostile peer never
// blocks Accept. Outgoing connections are bound to the IP of the listen
// address, so that peers (and test proxies) see which member dials.
type streamLayer struct {
	net.Listener
	advertise net.Addr
	client    *tls.Config
	local     *net.TCPAddr
}

// Addr returns the advertised address.
func (l *streamLayer) Addr() net.Addr { return l.advertise }

// Dial opens a connection to a peer. Without a ServerName in the client
// config, the peer's certificate is verified against the dialled host.
func (l *streamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout, LocalAddr: l.local}
	if l.client == nil {
		return d.Dial("tcp", string(address))
	}
	cfg := l.client.Clone()
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(string(address))
		if err != nil {
			return nil, fmt.Errorf("raftnode: peer address %q: %w", address, err)
		}
		cfg.ServerName = host
	}
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
