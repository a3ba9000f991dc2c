// Package server is the store's thin gRPC layer: it validates requests,
// routes writes through raft and reads to the MVCC store, streams watches
// from the hub, fills response headers, and maps errors to gRPC statuses
// (errors.go). It holds no state of its own.
//
// # Validation
//
// This package is the API boundary that owns request validation: every
// Range and Txn is validated here, once (mvcc.ValidateRange,
// mvcc.ValidateTxn, then the per-node Limits for a Txn), before any read
// barrier, forwarding or proposal. Bad input is therefore refused with
// INVALID_ARGUMENT even while there is no leader, and never costs a
// barrier or a log entry. The MVCC read methods called afterwards
// (mvcc.Store.Range, ReadTxn) take validated requests and do not check
// again; applying a raft entry validates it once more, as the log's own
// boundary (see mvcc's validate.go). Watch creation is validated by the
// hub (watch.Hub.Watch).
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/mvcc"
	"github.com/meridian-cp/meridian/services/store/internal/raftnode"
	"github.com/meridian-cp/meridian/services/store/internal/watch"
	"github.com/meridian-cp/meridian/services/store/internal/wire"
)

// Node is the raft side: writes, linearizable read barriers, membership,
// state. Leader-only methods fail with an error wrapping
// raftnode.ErrNotLeader and raftnode.ErrNotProposed elsewhere; the server
// then forwards the request to the leader.
type Node interface {
	Txn(ctx context.Context, req *storev1.TxnRequest) (*storev1.TxnResponse, error)
	Compact(ctx context.Context, rev int64) (*storev1.CompactResponse, error)
	LinearizableBarrier(ctx context.Context) error
	ReadIndex(ctx context.Context) (uint64, error)
	WaitIndex(ctx context.Context, index uint64) error
	AddMember(ctx context.Context, id, peerAddr, clientAddr string, nonVoter bool) error
	UpdateClientAddress(ctx context.Context, id, clientAddr string) error
	RemoveMember(ctx context.Context, id string) error
	PromoteMember(ctx context.Context, id string) error
	TransferLeadership(ctx context.Context, id string) (string, error)
	LeaseGrant(ctx context.Context, id int64, ttl time.Duration) (*storev1.LeaseGrantResponse, error)
	LeaseRevoke(ctx context.Context, id int64) (*storev1.LeaseRevokeResponse, error)
	LeaseRenew(ctx context.Context, id int64) (time.Duration, error)
	LeaseTimeToLive(ctx context.Context, id int64, keys bool) (*storev1.LeaseTimeToLiveResponse, error)
	Status() raftnode.Status
	Members(ctx context.Context) ([]*storev1.Member, error)
	IsLeader() bool
	LeaderID() string
	ID() string
	MemberID() uint64
	Term() uint64
}

// KV is the local MVCC state.
type KV interface {
	Range(ctx context.Context, req *storev1.RangeRequest) (*storev1.RangeResponse, error)
	// ReadTxn evaluates a transaction that only reads (wire.TxnWrites
	// false) on local state.
	ReadTxn(ctx context.Context, req *storev1.TxnRequest) (*storev1.TxnResponse, error)
	Rev() int64
	CompactRev() int64
	// NewSnapshot pins the applied state for MaintenanceService.Snapshot;
	// the caller closes it.
	NewSnapshot() *mvcc.Snapshot
}

// Watches registers watchers.
type Watches interface {
	Watch(req *storev1.WatchCreateRequest) (*watch.Watcher, error)
}

var (
	_ Node    = (*raftnode.Node)(nil)
	_ KV      = (*mvcc.Store)(nil)
	_ Watches = (*watch.Hub)(nil)
)

// Config wires a Server.
type Config struct {
	Node    Node
	KV      KV
	Watches Watches
	// Limits are checked before proposing.
	Limits mvcc.Limits
	// DBSize reports the on-disk size of the store in bytes.
	DBSize func() int64
	// Members returns the client address of each member (the membership
	// keyspace); used to forward to the leader and in MemberList.
	Members func() (map[string]string, error)
	// ClientTLS dials the leader when forwarding; nil dials in plaintext
	// (tests).
	ClientTLS *tls.Config
	// WatchCancelGrace is how long a watch stream cancelled by the store
	// may take to deliver its final response before the stream is ended;
	// default 5s.
	WatchCancelGrace time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Server implements the storev1 services.
type Server struct {
	cfg Config
	fwd *forwarder
}

// New returns a server.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.WatchCancelGrace <= 0 {
		cfg.WatchCancelGrace = 5 * time.Second
	}
	if cfg.DBSize == nil {
		cfg.DBSize = func() int64 { return 0 }
	}
	if cfg.Members == nil {
		cfg.Members = func() (map[string]string, error) { return nil, nil }
	}
	return &Server{cfg: cfg, fwd: newForwarder(cfg.Node, cfg.Members, cfg.ClientTLS)}
}

// Close releases the connections used to forward to the leader.
func (s *Server) Close() { s.fwd.Close() }

// Register registers every storev1 service on g.
func (s *Server) Register(g grpc.ServiceRegistrar) {
	storev1.RegisterKVServiceServer(g, &kvServer{s: s})
	storev1.RegisterWatchServiceServer(g, &watchServer{s: s})
	storev1.RegisterMaintenanceServiceServer(g, &maintenanceServer{s: s})
	storev1.RegisterClusterServiceServer(g, &clusterServer{s: s})
	storev1.RegisterLeaseServiceServer(g, &leaseServer{s: s})
}

// header returns a response header at revision rev (0 = current).
func (s *Server) header(rev int64) *storev1.ResponseHeader {
	if rev == 0 {
		rev = s.cfg.KV.Rev()
	}
	return &storev1.ResponseHeader{
		MemberId:        s.cfg.Node.MemberID(),
		Revision:        rev,
		RaftTerm:        s.cfg.Node.Term(),
		CompactRevision: s.cfg.KV.CompactRev(),
	}
}

// fillHeader completes a header whose revision (and compacted revision)
// the store set.
func (s *Server) fillHeader(h *storev1.ResponseHeader) *storev1.ResponseHeader {
	if h == nil {
		return s.header(0)
	}
	h.MemberId = s.cfg.Node.MemberID()
	h.RaftTerm = s.cfg.Node.Term()
	if h.CompactRevision == 0 {
		h.CompactRevision = s.cfg.KV.CompactRev()
	}
	return h
}

// leaderCall runs local on the leader and remote (forwarded to the leader)
// elsewhere. A local attempt refused before proposing (this member is not
// or no longer the leader) is forwarded; a request that was itself
// forwarded is never forwarded again.
func leaderCall[Resp any](ctx context.Context, s *Server, local func(context.Context) (Resp, error),
	remote func(context.Context, *grpc.ClientConn) (Resp, error)) (Resp, error) {
	if s.cfg.Node.IsLeader() || isForwarded(ctx) {
		resp, err := local(ctx)
		if err == nil || isForwarded(ctx) || !errIsNotLeader(err) || !errors.Is(err, raftnode.ErrNotProposed) {
			return resp, err
		}
	}
	var zero Resp
	conn, fctx, err := s.fwd.leader(ctx)
	if err != nil {
		return zero, err
	}
	resp, err := remote(fctx, conn)
	if err != nil {
		return zero, forwardErr(err)
	}
	return resp, nil
}

// linearize returns once this member's state reflects every write
// acknowledged before the call: on the leader with a local read barrier;
// elsewhere with a read index from the leader (ClusterService.ReadIndex),
// then waiting to apply up to it locally.
func (s *Server) linearize(ctx context.Context) error {
	if s.cfg.Node.IsLeader() || isForwarded(ctx) {
		err := s.cfg.Node.LinearizableBarrier(ctx)
		if err == nil || isForwarded(ctx) || !errIsNotLeader(err) || !errors.Is(err, raftnode.ErrNotProposed) {
			return err
		}
	}
	conn, fctx, err := s.fwd.leader(ctx)
	if err != nil {
		return err
	}
	ri, err := storev1.NewClusterServiceClient(conn).ReadIndex(fctx, &storev1.ReadIndexRequest{})
	if err != nil {
		return forwardErr(err)
	}
	return s.cfg.Node.WaitIndex(ctx, ri.GetIndex())
}

// ConsistentRevision returns the store's current revision, read
// linearizably (what a linearizable Range's header reports), for a reader
// in this process: the all-in-one's watchfanout asks it before serving a
// consistent read from its cache, without a gRPC call per read. Errors are
// gRPC statuses, as a Range's.
func (s *Server) ConsistentRevision(ctx context.Context) (int64, error) {
	if err := s.linearize(ctx); err != nil {
		return 0, toStatus(err)
	}
	return s.cfg.KV.Rev(), nil
}

type kvServer struct {
	storev1.UnimplementedKVServiceServer
	s *Server
}

// Range serves a read: linearizable (the default) after a raft read
// barrier, serializable from local state. The request is validated here
// and only here (see "Validation" in the package comment).
func (k *kvServer) Range(ctx context.Context, req *storev1.RangeRequest) (*storev1.RangeResponse, error) {
	if err := mvcc.ValidateRange(req); err != nil {
		return nil, toStatus(err)
	}
	if !req.GetSerializable() {
		if err := k.s.linearize(ctx); err != nil {
			return nil, toStatus(err)
		}
	}
	resp, err := k.s.cfg.KV.Range(ctx, req)
	if err != nil {
		return nil, toStatus(err)
	}
	resp.Header = k.s.fillHeader(resp.Header)
	return resp, nil
}

// Txn proposes a transaction through raft, unless it only reads: that
// one is served like a linearizable Range, after a read barrier, from
// local state (as etcd does), and costs no log entry. The request is
// validated and checked against the limits before either (see
// "Validation" in the package comment).
func (k *kvServer) Txn(ctx context.Context, req *storev1.TxnRequest) (*storev1.TxnResponse, error) {
	if err := mvcc.ValidateTxn(req); err != nil {
		return nil, toStatus(err)
	}
	if err := checkTxnKeyScope(ctx, req); err != nil {
		return nil, err
	}
	if err := k.s.cfg.Limits.CheckTxnLimits(req, proto.Size(req)); err != nil {
		return nil, toStatus(err)
	}
	var resp *storev1.TxnResponse
	var err error
	if wire.TxnWrites(req) {
		resp, err = leaderCall(ctx, k.s,
			func(ctx context.Context) (*storev1.TxnResponse, error) { return k.s.cfg.Node.Txn(ctx, req) },
			func(ctx context.Context, c *grpc.ClientConn) (*storev1.TxnResponse, error) {
				return storev1.NewKVServiceClient(c).Txn(ctx, req)
			})
	} else if err = k.s.linearize(ctx); err == nil {
		resp, err = k.s.cfg.KV.ReadTxn(ctx, req)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	resp.Header = k.s.fillHeader(resp.Header)
	return resp, nil
}

// Compact proposes a compaction through raft.
func (k *kvServer) Compact(ctx context.Context, req *storev1.CompactRequest) (*storev1.CompactResponse, error) {
	if req.GetRevision() <= 0 {
		return nil, status.Error(codes.InvalidArgument, "store: compact revision must be positive")
	}
	resp, err := leaderCall(ctx, k.s,
		func(ctx context.Context) (*storev1.CompactResponse, error) {
			return k.s.cfg.Node.Compact(ctx, req.GetRevision())
		},
		func(ctx context.Context, c *grpc.ClientConn) (*storev1.CompactResponse, error) {
			return storev1.NewKVServiceClient(c).Compact(ctx, req)
		})
	if err != nil {
		return nil, toStatus(err)
	}
	resp.Header = k.s.fillHeader(resp.Header)
	return resp, nil
}

type maintenanceServer struct {
	storev1.UnimplementedMaintenanceServiceServer
	s *Server
}

// Status reports this member's state.
func (m *maintenanceServer) Status(ctx context.Context, _ *storev1.StatusRequest) (*storev1.StatusResponse, error) {
	st := m.s.cfg.Node.Status()
	return &storev1.StatusResponse{
		Header:       m.s.header(0),
		MemberId:     st.ID,
		LeaderId:     st.LeaderID,
		RaftState:    st.State,
		RaftTerm:     st.Term,
		AppliedIndex: st.AppliedIndex,
		CommitIndex:  st.CommitIndex,
		DbSizeBytes:  m.s.cfg.DBSize(),
		Voter:        st.Voter,
	}, nil
}

// Cluster returns the ClusterService implementation, for in-process calls
// (a member registering its own client address through the leader).
func (s *Server) Cluster() storev1.ClusterServiceServer { return &clusterServer{s: s} }
