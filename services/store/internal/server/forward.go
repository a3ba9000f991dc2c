package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/meridian-cp/meridian/lib/telemetry"
	"github.com/meridian-cp/meridian/services/store/internal/raftnode"
	"github.com/meridian-cp/meridian/services/store/internal/wire"
)

// ErrNoLeader: the request could not be sent to the leader (none known,
// its client address unknown, or it is unreachable). It wraps
// raftnode.ErrNotProposed: nothing was proposed.
var ErrNoLeader = fmt.Errorf("server: no reachable leader: %w", raftnode.ErrNotProposed)

// leaderWait bounds how long a forwarded request waits for a leader to be
// known (elections take about one election timeout).
const leaderWait = 3 * time.Second

// forwarder sends requests that only the leader can serve (writes,
// membership changes, read indexes) to it over gRPC. Connections are cached
// per client address and closed by Close.
type forwarder struct {
	node    Node
	members func() (map[string]string, error)
	creds   credentials.TransportCredentials

	mu struct {
		sync.Mutex
		conns  map[string]*grpc.ClientConn
		closed bool
	}
}

func newForwarder(node Node, members func() (map[string]string, error), clientTLS *tls.Config) *forwarder {
	f := &forwarder{node: node, members: members, creds: insecure.NewCredentials()}
	if clientTLS != nil {
		f.creds = credentials.NewTLS(clientTLS)
	}
	f.mu.conns = map[string]*grpc.ClientConn{}
	return f
}

// isForwarded reports whether the request came from another member.
func isForwarded(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	return len(md.Get(wire.ForwardedKey)) > 0
}

// leader returns a connection to the leader and a context marked as
// forwarded. It waits (bounded by ctx and leaderWait) for a leader to be
// known. It fails with ErrNoLeader when this member is the leader's own
// forwarding target of a forwarded request, or nothing is known.
func (f *forwarder) leader(ctx context.Context) (*grpc.ClientConn, context.Context, error) {
	if isForwarded(ctx) {
		return nil, nil, fmt.Errorf("%w: forwarded to a member that is not the leader", ErrNoLeader)
	}
	deadline := time.Now().Add(leaderWait)
	for {
		id := f.node.LeaderID()
		if id != "" && id != f.node.ID() {
			ms, err := f.members()
			if err != nil {
				return nil, nil, err
			}
			if addr := ms[id]; addr != "" {
				conn, err := f.conn(addr)
				if err != nil {
					return nil, nil, err
				}
				return conn, metadata.AppendToOutgoingContext(ctx, wire.ForwardedKey, f.node.ID()), nil
			}
		}
		if id == f.node.ID() {
			// Became the leader meanwhile: the caller serves locally
			// on its retry.
			return nil, nil, fmt.Errorf("%w: leadership changed", ErrNoLeader)
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("%w: leader %q (client address unknown or none elected)", ErrNoLeader, id)
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (f *forwarder) conn(addr string) (*grpc.ClientConn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.closed {
		return nil, fmt.Errorf("%w: server closing", ErrNoLeader)
	}
	if c := f.mu.conns[addr]; c != nil {
		return c, nil
	}
	c, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(f.creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20))},
		telemetry.GRPCClientOptions()...)...)
	if err != nil {
		return nil, fmt.Errorf("server: dial leader %s: %w", addr, err)
	}
	f.mu.conns[addr] = c
	return c, nil
}

// Close closes the cached connections.
func (f *forwarder) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mu.closed = true
	for _, c := range f.mu.conns {
		_ = c.Close()
	}
	f.mu.conns = nil
}

// forwardErr maps an error of a forwarded call: statuses from the leader
// pass through, except that a failure to reach it (the request never left)
// is marked not proposed.
func forwardErr(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	if st.Code() == codes.Unavailable && NotSent(err) {
		return fmt.Errorf("%w: %s", ErrNoLeader, st.Message())
	}
	return err
}

// NotSent reports whether a gRPC error says the request never left the
// client: the connection could not be established.
func NotSent(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	m := st.Message()
	return strings.Contains(m, "while dialing") || strings.Contains(m, "connection refused") ||
		strings.Contains(m, "produced zero addresses") || strings.Contains(m, "authentication handshake failed")
}

// errIsNotLeader reports whether err means "ask the leader".
func errIsNotLeader(err error) bool { return errors.Is(err, raftnode.ErrNotLeader) }
