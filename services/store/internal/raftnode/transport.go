package raftnode

import (
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// newTransport returns the raft transport for cfg.
//
// Without a PeerAddress the node uses raft's in-memory transport with the
// address "inmem:<id>": a single-node group needs no network, and nothing
// listens. With one, it uses raft's TCP transport, bound to and advertising
// PeerAddress, which must therefore name a concrete IP and a non-zero port.
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
	t, err := raft.NewTCPTransportWithLogger(cfg.PeerAddress, addr, 3, 10*time.Second, hl.Named("transport"))
	if err != nil {
		return nil, fmt.Errorf("raftnode: raft transport on %s: %w", cfg.PeerAddress, err)
	}
	return t, nil
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
