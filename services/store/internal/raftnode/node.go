// Package raftnode runs the hashicorp/raft node of the store: the log in
// its own segment files (package raftwal), the stable store in pebble
// (package raftstable), file snapshots, the transport, bootstrap, proposals,
// linearizable reads, leases and membership changes.
package raftnode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/meridian-cp/meridian/lib/telemetry"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/fsm"
	"github.com/meridian-cp/meridian/services/store/internal/raftstable"
	"github.com/meridian-cp/meridian/services/store/internal/raftwal"
	"github.com/meridian-cp/meridian/services/store/internal/wire"
)

// Errors of the node; all map to UNAVAILABLE at the API.
var (
	// ErrNotLeader: this member is not the leader (or lost leadership
	// while the request was in flight; a write's outcome is then unknown).
	ErrNotLeader = errors.New("raftnode: not the leader")
	// ErrStopped: the node is shutting down.
	ErrStopped = errors.New("raftnode: stopped")
	// ErrTimeout: the proposal could not be enqueued in time.
	ErrTimeout = errors.New("raftnode: timed out")
	// ErrNotProposed is wrapped (with ErrNotLeader or ErrTimeout) when the
	// request provably never reached the raft log: a client may retry it
	// elsewhere, even a write.
	ErrNotProposed = errors.New("raftnode: request was not proposed")
	// ErrNoSuchMember: a membership change names an unknown member (maps to
	// NOT_FOUND).
	ErrNoSuchMember = errors.New("raftnode: no such member")
)

// Peer is a voter of the initial configuration.
type Peer struct {
	// ID is the raft server id.
	ID string
	// Address is its raft transport address.
	Address string
}

// DefaultCommitTimeout is raft's CommitTimeout here, and raft's own
// default: when no new entries flow, the leader sends each follower an
// AppendEntries carrying its commit index after CommitTimeout to twice
// that.
//
// Followers do not wait for it to learn of a commit: the leader's nudge
// (nudge.go) tells them at once. It is the backstop if a nudge is lost,
// so it need not be short, and a shorter one costs idle traffic (an
// AppendEntries to every follower per CommitTimeout, on every member).
const DefaultCommitTimeout = 50 * time.Millisecond

// Config configures a Node.
type Config struct {
	// ID is the raft server id.
	ID string
	// DB holds raft's stable store (package raftstable); a legacy raft log
	// still in it is moved to LogDir by Start. The caller closes it after
	// Shutdown.
	DB *pebble.DB
	// LogDir holds the raft log's segments (package raftwal).
	LogDir string
	// FS is the filesystem for the log's segments (the disk guard's); nil
	// is the OS's.
	FS vfs.FS
	// Fatal is called when the log cannot be synced and must not return
	// (see package raftwal); nil panics.
	Fatal func(error)
	// SnapshotDir holds raft's file snapshots.
	SnapshotDir string
	// PeerAddress is the raft TCP bind and advertise address ("host:port",
	// port not 0). Empty selects an in-memory transport: a single-node
	// group that no other member can join.
	PeerAddress string
	// PeerAdvertise is the raft address given to peers when it differs
	// from PeerAddress (a proxy, NAT); default PeerAddress.
	PeerAdvertise string
	// Bootstrap creates the initial configuration when there is no raft
	// state yet: the voters InitialCluster, or this node alone when it is
	// empty. Every member of a new cluster is started with the same
	// InitialCluster (raft ignores identical bootstraps).
	Bootstrap bool
	// InitialCluster lists the voters of a bootstrapped cluster; it must
	// include this node.
	InitialCluster []Peer
	// ServerTLS, when set, serves the raft transport over TLS (set
	// ClientAuth for mutual TLS); ClientTLS is then required and used to
	// dial peers. Both nil: plain TCP (tests only).
	ServerTLS, ClientTLS *tls.Config
	// SnapshotThreshold and TrailingLogs override raft's (8192 and 10240
	// entries): a snapshot is taken once that many entries were appended
	// since the last one, and that many entries are kept after it so that
	// slow followers catch up from the log rather than a snapshot.
	SnapshotThreshold, TrailingLogs uint64
	// SnapshotInterval overrides how often raft checks whether to snapshot
	// (120s).
	SnapshotInterval time.Duration
	// HeartbeatTimeout and ElectionTimeout override raft's (1s each);
	// LeaderLeaseTimeout is set to half the heartbeat timeout.
	HeartbeatTimeout, ElectionTimeout time.Duration
	// CommitTimeout bounds how long a follower may go without learning
	// the leader's commit index when no new entries flow; 0 means
	// DefaultCommitTimeout.
	CommitTimeout time.Duration
	// RestoreOnStart restores the newest raft snapshot into the FSM at
	// start; needed only after an interrupted restore (the FSM's state is
	// otherwise durable in pebble).
	RestoreOnStart bool
	// FSM is the state machine.
	FSM *fsm.FSM
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Registerer receives the node's metrics; nil registers none.
	Registerer prometheus.Registerer
	// TracerProvider records the raft log's append (write + fsync) of
	// traced proposals (raftwal.Options.TracerProvider); nil: none.
	TracerProvider trace.TracerProvider
	// ApplyTimeout bounds how long a proposal may wait to be enqueued;
	// default 10s.
	ApplyTimeout time.Duration
	// AdmitWrite, if set, is called on the leader before proposing a write
	// that adds data (a Txn with a put or a delete, a lease grant); its
	// error refuses the write, wrapped with ErrNotProposed. Compactions,
	// lease revocations and membership changes are not subject to it.
	// The store uses it to refuse writes before the disk fills (package
	// disk).
	AdmitWrite func() error
}

// Node is a running raft member.
type Node struct {
	id      string
	raft    *raft.Raft
	logs    raft.LogStore
	wal     *raftwal.Log // under logs; closed after raft shut down
	fsm     *fsm.FSM
	trans   raft.Transport
	log     *slog.Logger
	metrics *metrics
	timeout time.Duration
	admit   func() error // Config.AdmitWrite; nil admits everything

	// barrierTerm is the last term in which this node, as leader, applied
	// a barrier: from then on its commit index covers every entry
	// committed by earlier leaders.
	barrierTerm atomic.Uint64
	// fresh is true when the node started without raft state (a new
	// member waiting to be added, or one that lost its data).
	fresh bool

	lessor lessor

	// nudges signals nudgeFollowers (capacity 1; nudgingFSM signals it
	// too); stopNudges stops it,
	// and nudgerDone is closed once it returned.
	nudges     chan struct{}
	stopNudges context.CancelFunc
	nudgerDone chan struct{}
	// notices sends commit notices along with each nudge (notice.go).
	notices noticer
	// lone is the lone command this node appended last as leader, until
	// an answer makes it committed (acknotice.go); nil for none.
	lone atomic.Pointer[termIndex]
	// stored holds the batch the log store last handed on for follower
	// notices (followernotice.go), until followerNotices takes it.
	stored *storedQueue
	// relays holds this voter's plan for relayed commit notices and the
	// batch they send next (relay.go, distance.go).
	relays *relays

	// vmu guards the coalesced VerifyLeader round (see verifyLeader).
	vmu      sync.Mutex
	vwaiting []chan error
	vrunning bool

	closeOnce sync.Once
	closeErr  error
}

// Start opens the raft node. It does not wait for a leader (see
// WaitReady). Its steps: open raft's stores, the transport, raft's
// configuration, bootstrap, then raft and the node's own loops; a step
// that fails closes what the earlier ones opened.
func Start(cfg Config) (*Node, error) {
	cfg = cfg.withDefaults()
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	hl := newHCLog(cfg.Logger, "raft")
	st, err := openStores(cfg, hl, func(d time.Duration) {
		m.logSync.Observe(d.Seconds())
		m.etcd.walFsync.Observe(d.Seconds())
	})
	if err != nil {
		return nil, err
	}
	started := false
	defer func() {
		if !started {
			_ = st.wal.Close()
		}
	}()
	trans, err := newTransport(cfg, hl)
	if err != nil {
		return nil, err
	}
	defer func() {
		if !started {
			closeTransport(trans)
		}
	}()
	rc, err := raftConfig(cfg, hl)
	if err != nil {
		return nil, err
	}
	fresh, err := bootstrap(cfg, rc, st, trans)
	if err != nil {
		return nil, err
	}
	nf := &nudgingFSM{FSM: cfg.FSM, nudges: make(chan struct{}, 1)}
	ls := &noticingLogStore{LogStore: st.logs}
	r, err := raft.NewRaft(rc, nf, ls, st.stable, st.snaps, trans)
	if err != nil {
		return nil, fmt.Errorf("raftnode: start raft: %w", err)
	}
	nf.raft.Store(r)
	started = true
	n := &Node{id: cfg.ID, raft: r, logs: st.logs, wal: st.wal, fsm: cfg.FSM, trans: trans, log: cfg.Logger, metrics: m,
		timeout: cfg.ApplyTimeout, admit: cfg.AdmitWrite, fresh: fresh,
		nudges: nf.nudges, nudgerDone: make(chan struct{}), stored: newStoredQueue(), relays: newRelays()}
	n.startLoops()
	nf.node.Store(n)
	ls.node.Store(n)
	if t, ok := trans.(*trackedTransport); ok {
		t.node.Store(n)
	}
	return n, nil
}

// withDefaults returns cfg with its zero fields set to their defaults.
func (cfg Config) withDefaults() Config {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ApplyTimeout <= 0 {
		cfg.ApplyTimeout = 10 * time.Second
	}
	return cfg
}

// stores are raft's storage: the stable store in the shared pebble DB,
// the log in segments (behind raft's cache) and the file snapshots.
type stores struct {
	stable *raftstable.Store
	wal    *raftwal.Log  // closed by the node after raft shut down
	logs   raft.LogStore // wal behind raft's LogCache
	snaps  raft.SnapshotStore
}

// openStores opens raft's storage for cfg, first moving a legacy raft log
// still in the pebble DB into segments (raftwal.Migrate, idempotent if
// interrupted). observeSync receives the duration of every synced write.
// On failure nothing is left open.
func openStores(cfg Config, hl hclog.Logger, observeSync func(time.Duration)) (_ *stores, err error) {
	legacy, err := raftstable.OpenLegacyLog(cfg.DB, observeSync)
	if err != nil {
		return nil, err
	}
	wl, err := raftwal.Open(raftwal.Options{Dir: cfg.LogDir, FS: cfg.FS, ObserveSync: observeSync, Fatal: cfg.Fatal, TracerProvider: cfg.TracerProvider,
		LocalID: cfg.ID})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = wl.Close()
		}
	}()
	if n, err := raftwal.Migrate(legacy, wl); err != nil {
		return nil, err
	} else if n > 0 {
		cfg.Logger.Info("moved the raft log out of pebble", "entries", n, "dir", cfg.LogDir)
	}
	logs, err := raft.NewLogCache(512, wl)
	if err != nil {
		return nil, fmt.Errorf("raftnode: log cache: %w", err)
	}
	if err := os.MkdirAll(cfg.SnapshotDir, 0o700); err != nil {
		return nil, fmt.Errorf("raftnode: snapshot dir: %w", err)
	}
	files, err := raft.NewFileSnapshotStoreWithLogger(cfg.SnapshotDir, 2, hl.Named("snapshots"))
	if err != nil {
		return nil, fmt.Errorf("raftnode: snapshot store: %w", err)
	}
	snaps, err := newSnapshotStore(files, wl)
	if err != nil {
		return nil, err
	}
	return &stores{stable: raftstable.New(cfg.DB, observeSync), wal: wl, logs: logs, snaps: snaps}, nil
}

// raftConfig returns raft's configuration for cfg, validated.
func raftConfig(cfg Config, hl hclog.Logger) (*raft.Config, error) {
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.Logger = hl
	rc.BatchApplyCh = true    // group commit: the leader appends queued proposals together
	rc.MaxAppendEntries = 256 // and the FSM applies them in one batch
	rc.NoSnapshotRestoreOnStart = !cfg.RestoreOnStart
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
	}
	if cfg.SnapshotInterval > 0 {
		rc.SnapshotInterval = cfg.SnapshotInterval
	}
	if cfg.TrailingLogs > 0 {
		rc.TrailingLogs = cfg.TrailingLogs
	}
	if cfg.HeartbeatTimeout > 0 {
		rc.HeartbeatTimeout = cfg.HeartbeatTimeout
		rc.LeaderLeaseTimeout = cfg.HeartbeatTimeout / 2
	}
	if cfg.ElectionTimeout > 0 {
		rc.ElectionTimeout = cfg.ElectionTimeout
	}
	rc.CommitTimeout = DefaultCommitTimeout
	if cfg.CommitTimeout > 0 {
		rc.CommitTimeout = cfg.CommitTimeout
	}
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("raftnode: %w", err)
	}
	return rc, nil
}

// bootstrap writes the initial configuration when cfg.Bootstrap is set
// and there is no raft state yet: the voters of cfg.InitialCluster, or
// this node alone. It reports whether the node started without raft state
// (fresh), bootstrapped or not.
func bootstrap(cfg Config, rc *raft.Config, st *stores, trans raft.Transport) (fresh bool, err error) {
	has, err := raft.HasExistingState(st.logs, st.stable, st.snaps)
	if err != nil {
		return false, fmt.Errorf("raftnode: check state: %w", err)
	}
	if !cfg.Bootstrap || has {
		return !has, nil
	}
	conf := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: rc.LocalID, Address: trans.LocalAddr()}}}
	if len(cfg.InitialCluster) > 0 {
		conf.Servers = nil
		for _, p := range cfg.InitialCluster {
			conf.Servers = append(conf.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Address)})
		}
	}
	if err := raft.BootstrapCluster(rc, st.logs, st.stable, st.snaps, trans, conf); err != nil {
		return false, fmt.Errorf("raftnode: bootstrap: %w", err)
	}
	cfg.Logger.Info("bootstrapped a raft cluster", "id", cfg.ID, "address", trans.LocalAddr(), "voters", len(conf.Servers))
	return true, nil
}

// startLoops registers the metrics that read the node's state and starts
// the nudger (nudge.go), the follower notices (followernotice.go) and,
// on a network transport, the relayed ones (relay.go, distance.go);
// Shutdown stops them.
func (n *Node) startLoops() {
	n.metrics.observe(n)
	ctx, stop := context.WithCancel(context.Background())
	n.stopNudges = stop
	n.notices = noticer{node: n, ctx: ctx}
	go func() {
		<-ctx.Done()
		n.notices.close()
	}()
	go n.metrics.etcd.countLeaderChanges(ctx, n.raft)
	go n.followerNotices()
	if _, tracked := n.trans.(*trackedTransport); tracked {
		go n.measureDistances(ctx)
		go n.relayCommits(ctx)
	}
	go func() {
		defer close(n.nudgerDone)
		n.nudgeFollowers(ctx)
	}()
}

func closeTransport(t raft.Transport) {
	if c, ok := t.(raft.WithClose); ok {
		_ = c.Close()
	}
}

// ID returns the raft server id.
func (n *Node) ID() string { return n.id }

// MemberID returns the numeric member id used in response headers: the
// FNV-64a hash of the server id.
func (n *Node) MemberID() uint64 { return MemberID(n.id) }

// MemberID hashes a raft server id to the numeric id of response headers.
func MemberID(id string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return h.Sum64()
}

// Term returns the current raft term.
func (n *Node) Term() uint64 { return n.raft.CurrentTerm() }

// IsLeader reports whether this member is the leader.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// WaitReady blocks until the group has a leader and this member has applied
// every entry the leader had committed when it was elected (for the leader:
// a barrier), or ctx ends. A leadership lost during the barrier (an
// election right after the first, on a loaded machine) starts over.
func (n *Node) WaitReady(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if _, id := n.raft.LeaderWithID(); id != "" {
			if !n.IsLeader() {
				return n.WaitIndex(ctx, n.raft.CommitIndex())
			}
			err := n.leaderBarrier(ctx)
			if err == nil || !errors.Is(err, ErrNotLeader) || ctx.Err() != nil {
				return err
			}
			n.log.Info("leadership lost while starting; waiting for the next leader", "error", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("raftnode: waiting for a leader: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// waitApplied waits until the FSM has applied every entry up to index that
// it will ever see. Raft keeps no-op and barrier entries to itself, so the
// FSM's applied index stops at the last command or configuration entry:
// waiting for a no-op's index would never end.
func (n *Node) waitApplied(ctx context.Context, index uint64) error {
	target, err := n.fsmIndex(index)
	if err != nil {
		return err
	}
	return n.fsm.WaitApplied(ctx, target)
}

// fsmIndex returns the newest index at or below index whose entry reaches
// the FSM, or 0 when the FSM has nothing to wait for.
func (n *Node) fsmIndex(index uint64) (uint64, error) {
	var l raft.Log
	for i := index; i > n.fsm.AppliedIndex(); i-- {
		if err := n.logs.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				// Compacted into a snapshot, which raft takes only after
				// the FSM applied everything handed to it.
				return 0, nil
			}
			return 0, fmt.Errorf("raftnode: read log %d: %w", i, err)
		}
		if l.Type == raft.LogCommand || l.Type == raft.LogConfiguration {
			return i, nil
		}
	}
	return 0, nil
}

// leaderBarrier applies a barrier once per term, so the leader's commit
// index covers every entry committed by earlier leaders.
func (n *Node) leaderBarrier(ctx context.Context) error {
	term := n.raft.CurrentTerm()
	if n.barrierTerm.Load() == term {
		return nil
	}
	if err := wait(ctx, n.raft.Barrier(n.timeout)); err != nil {
		return mapErr(err)
	}
	n.signalNudge() // followers wait for it in WaitReady
	n.barrierTerm.Store(term)
	return nil
}

// LinearizableBarrier returns once this member's state reflects every write
// acknowledged before the call: it captures the commit index, confirms
// leadership with a heartbeat round (VerifyLeader), then waits for the FSM's
// own applied index (not raft's AppliedIndex, which moves when entries are
// handed to the FSM) to reach the captured index.
//
// Only the leader serves it; followers answer ErrNotLeader and use
// ReadIndex on the leader, then WaitIndex.
func (n *Node) LinearizableBarrier(ctx context.Context) error {
	index, err := n.ReadIndex(ctx)
	if err != nil {
		return err
	}
	return n.waitApplied(ctx, index)
}

// Txn proposes a transaction and returns its result once applied. A
// transaction that writes is first admitted (Config.AdmitWrite).
func (n *Node) Txn(ctx context.Context, req *storev1.TxnRequest) (*storev1.TxnResponse, error) {
	if !n.IsLeader() {
		return nil, notLeader()
	}
	if wire.TxnWrites(req) {
		if err := n.admitWrite(); err != nil {
			return nil, err
		}
	}
	data, err := fsm.EncodeTxn(req)
	if err != nil {
		return nil, err
	}
	return proposeFor[*storev1.TxnResponse](ctx, n, data, "txn")
}

// admitWrite asks Config.AdmitWrite whether a write that adds data may be
// proposed.
func (n *Node) admitWrite() error {
	if n.admit == nil {
		return nil
	}
	if err := n.admit(); err != nil {
		return fmt.Errorf("%w: %w", err, ErrNotProposed)
	}
	return nil
}

// Compact proposes a compaction and returns its result once applied.
func (n *Node) Compact(ctx context.Context, rev int64) (*storev1.CompactResponse, error) {
	data, err := fsm.EncodeCompact(&storev1.CompactRequest{Revision: rev})
	if err != nil {
		return nil, err
	}
	return proposeFor[*storev1.CompactResponse](ctx, n, data, "compact")
}

// propose appends data to the raft log and waits until it is applied. If
// ctx ends first the proposal may still be applied.
func (n *Node) propose(ctx context.Context, data []byte) (any, error) {
	if !n.IsLeader() {
		return nil, fmt.Errorf("%w: %w", ErrNotLeader, ErrNotProposed)
	}
	n.metrics.pending.Inc()
	defer n.metrics.pending.Dec()
	start := time.Now()
	timeout := n.timeout
	if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
		timeout = max(time.Until(d), time.Millisecond)
	}
	ctx, span := telemetry.StartSpan(ctx, telemetry.ScopeStore, "store.propose")
	defer span.End()
	var f raft.ApplyFuture
	if tp := telemetry.Traceparent(ctx); tp != "" {
		// The entry carries the proposal's trace context: the log append
		// (raftwal) and the apply (fsm) continue its trace, on every
		// member.
		f = n.raft.ApplyLog(raft.Log{Data: data, Extensions: []byte(tp)}, timeout)
	} else {
		f = n.raft.Apply(data, timeout)
	}
	if err := wait(ctx, f); err != nil {
		return nil, mapErr(err)
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.Int64("raft.index", int64(f.Index())))
	}
	n.metrics.propose.Observe(time.Since(start).Seconds())
	if err, ok := f.Response().(error); ok {
		return nil, err
	}
	return f.Response(), nil
}

// proposeFor proposes data like propose and returns the FSM's response,
// which must be a Resp (the response type of the command data encodes;
// what names the command in the error otherwise).
func proposeFor[Resp any](ctx context.Context, n *Node, data []byte, what string) (Resp, error) {
	var zero Resp
	resp, err := n.propose(ctx, data)
	if err != nil {
		return zero, err
	}
	r, ok := resp.(Resp)
	if !ok {
		return zero, fmt.Errorf("raftnode: %s applied with response %T", what, resp)
	}
	return r, nil
}

// wait waits for f or ctx.
func wait(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// mapErr maps an error of hashicorp/raft to the node's errors, keeping
// the original in the chain. raft answers ErrNotLeader,
// ErrLeadershipTransferInProgress, ErrNotVoter and ErrEnqueueTimeout
// before appending, so those also wrap ErrNotProposed; ErrLeadershipLost
// and ErrRaftShutdown may come after (the outcome is then unknown), so
// they do not. Other errors are returned as they are.
func mapErr(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress),
		errors.Is(err, raft.ErrNotVoter):
		return fmt.Errorf("%w: %w: %w", ErrNotLeader, ErrNotProposed, err)
	case errors.Is(err, raft.ErrLeadershipLost):
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return fmt.Errorf("%w: %w", ErrStopped, err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %w: %w", ErrTimeout, ErrNotProposed, err)
	}
	return err
}

// Status is a snapshot of the node's raft state.
type Status struct {
	ID           string
	LeaderID     string
	State        string
	Term         uint64
	CommitIndex  uint64
	AppliedIndex uint64 // the FSM's
	FirstIndex   uint64 // first raft log index kept (log truncation)
	Voter        bool
	// Member is whether this node is in the raft configuration (as a voter
	// or a non-voter): false before a joining member was added and after
	// it was removed.
	Member bool
}

// Status reports the node's raft state.
func (n *Node) Status() Status {
	_, leader := n.raft.LeaderWithID()
	st := Status{
		ID:           n.id,
		LeaderID:     string(leader),
		State:        n.raft.State().String(),
		Term:         n.raft.CurrentTerm(),
		CommitIndex:  n.raft.CommitIndex(),
		AppliedIndex: n.fsm.AppliedIndex(),
	}
	st.FirstIndex, _ = n.logs.FirstIndex()
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if string(s.ID) == n.id {
				st.Member = true
				st.Voter = s.Suffrage == raft.Voter
			}
		}
	}
	return st
}

// Members lists the members of the raft configuration.
func (n *Node) Members(ctx context.Context) ([]*storev1.Member, error) {
	conf, err := n.configuration(ctx)
	if err != nil {
		return nil, err
	}
	_, leader := n.raft.LeaderWithID()
	var out []*storev1.Member
	for _, s := range conf.Servers {
		out = append(out, &storev1.Member{
			Id:          string(s.ID),
			PeerAddress: string(s.Address),
			Voter:       s.Suffrage == raft.Voter,
			Leader:      s.ID == leader,
		})
	}
	return out, nil
}

// Shutdown stops raft, closes the transport and the log. Safe to call
// twice.
func (n *Node) Shutdown() error {
	n.closeOnce.Do(func() {
		n.stopNudges()
		n.closeErr = n.raft.Shutdown().Error()
		<-n.nudgerDone // it returns once stopped, even with a barrier in flight
		closeTransport(n.trans)
		if err := n.wal.Close(); err != nil {
			n.closeErr = errors.Join(n.closeErr, fmt.Errorf("raftnode: close log: %w", err))
		}
	})
	return n.closeErr
}
