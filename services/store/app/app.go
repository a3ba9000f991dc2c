package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/meridian-cp/meridian/lib/grpcserver"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/inproc"
	"github.com/meridian-cp/meridian/lib/telemetry"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/disk"
	"github.com/meridian-cp/meridian/services/store/internal/fsm"
	"github.com/meridian-cp/meridian/services/store/internal/mvcc"
	"github.com/meridian-cp/meridian/services/store/internal/raftnode"
	"github.com/meridian-cp/meridian/services/store/internal/server"
	"github.com/meridian-cp/meridian/services/store/internal/watch"
)

// healthInterval is how often the gRPC health status is re-evaluated.
const healthInterval = time.Second

// gracefulStopTimeout bounds Close's graceful gRPC stop.
const gracefulStopTimeout = 10 * time.Second

// App is a running store member. Its methods are safe for concurrent use.
type App struct {
	cfg    Config
	log    *slog.Logger
	db     *pebble.DB
	disk   *disk.Guard
	store  *mvcc.Store
	hub    *watch.Hub
	fsm    *fsm.FSM
	node   *raftnode.Node
	srv    *server.Server
	grpc   *grpc.Server
	health *health.Server
	reg    *trackingRegisterer // nil without a Registerer
	ready  atomic.Bool         // the last readiness reported (updateHealth)
	lag    atomic.Uint64       // the last lag measured, in log entries

	cancel context.CancelFunc // stops background goroutines
	wg     sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
	mu        sync.Mutex
	closed    bool
}

// New opens the data directory, starts raft (bootstrapping a single-voter
// cluster if cfg.Bootstrap and the directory is new) and waits, bounded by
// ctx, until the group has a leader and this member applied its log. It
// does not listen; call Serve.
func New(ctx context.Context, cfg Config) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	a := &App{cfg: cfg, log: cfg.Logger.With("component", "store", "id", cfg.ID)}
	if err := a.open(ctx); err != nil {
		a.closeParts()
		return nil, err
	}
	return a, nil
}

func (a *App) open(ctx context.Context) error {
	cfg := a.cfg
	var reg prometheus.Registerer
	if cfg.Registerer != nil {
		a.reg = &trackingRegisterer{reg: cfg.Registerer}
		reg = a.reg
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("store: data dir: %w", err)
	}
	guard, err := disk.New(disk.Options{
		FS: cfg.fs, Dir: cfg.DataDir, MinFreeBytes: cfg.MinFreeBytes, BallastBytes: cfg.BallastBytes,
		CheckInterval: cfg.diskCheckInterval, Logger: a.log, Registerer: reg,
	})
	if err != nil {
		return fmt.Errorf("store: disk guard: %w", err)
	}
	a.disk = guard
	cache := pebble.NewCache(cfg.CacheBytes)
	defer cache.Unref() // the DB holds its own reference
	// guard.FS releases the ballast when a write hits ENOSPC (package disk).
	db, err := pebble.Open(filepath.Join(cfg.DataDir, "db"), &pebble.Options{
		Logger: pebbleLogger{a.log}, Cache: cache, FS: guard.FS(), MemTableSize: uint64(max(cfg.MemTableBytes, 0)),
	})
	if err != nil {
		return fmt.Errorf("store: open pebble: %w", err)
	}
	a.db = db
	needsRestore, err := mvcc.NeedsRestore(db)
	if err != nil {
		return err
	}
	if needsRestore {
		a.log.Warn("an interrupted snapshot restore was found; restoring from the newest raft snapshot")
	}
	if a.store, err = mvcc.Open(db, cache); err != nil {
		return err
	}
	if a.hub, err = watch.New(a.store, a.store.Rev(), watch.Options{
		ProgressInterval: cfg.ProgressInterval, Logger: a.log, Registerer: reg,
	}); err != nil {
		return err
	}
	if a.fsm, err = fsm.New(a.store, a.hub, fsm.Options{
		Logger: a.log, Registerer: reg, ReasonRestored: watch.ReasonRestored, TracerProvider: cfg.TracerProvider,
		OnFatal: func(error) { a.setHealth(healthpb.HealthCheckResponse_NOT_SERVING) },
	}); err != nil {
		return err
	}
	a.health = health.NewServer()
	a.setHealth(healthpb.HealthCheckResponse_NOT_SERVING)
	rcfg := raftnode.Config{
		ID: cfg.ID, DB: db, SnapshotDir: filepath.Join(cfg.DataDir, "snapshots"),
		LogDir: filepath.Join(cfg.DataDir, "raft"), FS: guard.FS(), Fatal: a.fatalLog,
		PeerAddress: cfg.PeerAddress, PeerAdvertise: cfg.PeerAdvertise, Bootstrap: cfg.Bootstrap && len(cfg.Join) == 0, RestoreOnStart: needsRestore,
		FSM: a.fsm, Logger: a.log, Registerer: reg, TracerProvider: cfg.TracerProvider,
		SnapshotThreshold: cfg.SnapshotThreshold, TrailingLogs: cfg.TrailingLogs, SnapshotInterval: cfg.SnapshotInterval,
		HeartbeatTimeout: cfg.HeartbeatTimeout, ElectionTimeout: cfg.ElectionTimeout, CommitTimeout: cfg.CommitTimeout,
		AdmitWrite: guard.Admit,
	}
	if cfg.PeerAddress != "" && cfg.TLS != nil {
		// Raft connections carry no gRPC calls for the access policy to
		// check: both ends must be store members.
		rcfg.ServerTLS = identity.RequireOrganization(cfg.TLS, identity.StorePeerOrganization)
		rcfg.ClientTLS = identity.RequireOrganization(cfg.ClientTLS, identity.StorePeerOrganization)
	}
	for _, m := range cfg.InitialCluster {
		rcfg.InitialCluster = append(rcfg.InitialCluster, raftnode.Peer{ID: m.ID, Address: m.PeerAddress})
	}
	if a.node, err = raftnode.Start(rcfg); err != nil {
		return err
	}
	// raft restored its newest snapshot, if any, before Start returned
	// (RestoreOnStart). Checked here and only then: later a member that
	// catches up by snapshot (a joining one) may be in the middle of
	// installing one from the leader, which marks the store as being
	// restored until it is done.
	if needsRestore {
		if still, err := mvcc.NeedsRestore(db); err != nil || still {
			return errors.Join(err, fmt.Errorf("store: %w and no raft snapshot restored it; remove %s and rejoin", mvcc.ErrIncompleteRestore, cfg.DataDir))
		}
	}
	if a.node.Fresh() && len(cfg.Join) > 0 {
		if err := a.join(ctx); err != nil {
			return err
		}
	}
	if err := a.node.WaitReady(ctx); err != nil {
		return fmt.Errorf("store: waiting for raft: %w", err)
	}
	if err := a.registerMetrics(reg); err != nil {
		return err
	}

	opts := append([]grpc.ServerOption{
		// Above the request limit, so that oversized requests reach the
		// handler and get INVALID_ARGUMENT rather than RESOURCE_EXHAUSTED.
		grpc.MaxRecvMsgSize(cfg.MaxValueBytes + requestOverheadBytes + 1<<20),
		grpcserver.StreamWorkers(),
	}, grpcserver.Keepalive()...)
	opts = append(opts, grpcserver.Windows()...)
	// Tracing's interceptors first, so that the access check runs under
	// the call's span.
	opts = append(opts, telemetry.GRPCServerOptions(cfg.TracerProvider)...)
	if cfg.TLS != nil {
		access := server.Access()
		opts = append(opts, grpc.Creds(inproc.ServerCredentials(credentials.NewTLS(cfg.TLS))),
			grpc.ChainUnaryInterceptor(access.UnaryServerInterceptor()),
			grpc.ChainStreamInterceptor(access.StreamServerInterceptor()))
	}
	opts = append(opts, cfg.GRPCServerOptions...)
	a.grpc = grpc.NewServer(opts...)
	a.srv = server.New(server.Config{
		Node: a.node, KV: a.store, Watches: a.hub,
		Limits: mvcc.Limits{MaxValueBytes: cfg.MaxValueBytes, MaxRequestBytes: cfg.MaxValueBytes + requestOverheadBytes},
		DBSize: a.dbSize, Logger: a.log, Members: a.store.Members, ClientTLS: cfg.ClientTLS,
	})
	a.srv.Register(a.grpc)
	healthpb.RegisterHealthServer(a.grpc, a.health)

	bg, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	a.wg.Add(1)
	go func() { defer a.wg.Done(); a.watchHealth(bg) }()
	if cfg.PeerAddress != "" {
		a.wg.Add(1)
		go func() { defer a.wg.Done(); a.registerAddresses(bg) }()
	}
	a.wg.Add(1)
	go func() { defer a.wg.Done(); a.node.RunLessor(bg) }()
	a.wg.Add(1)
	go func() { defer a.wg.Done(); a.disk.Run(bg.Done()) }()
	if cfg.CompactionRetention > 0 {
		c := &compactor{
			interval: time.Minute, retention: cfg.CompactionRetention, log: a.log,
			rev: a.store.Rev, compactRev: a.store.CompactRev, isLeader: a.node.IsLeader,
			compact: func(ctx context.Context, rev int64) error { _, err := a.node.Compact(ctx, rev); return err },
		}
		a.wg.Add(1)
		go func() { defer a.wg.Done(); c.run(bg) }()
	}
	a.updateHealth(ctx)
	a.log.Info("store started", "revision", a.store.Rev(), "compact_revision", a.store.CompactRev(),
		"applied_index", a.store.AppliedIndex(), "data_dir", cfg.DataDir)
	return nil
}

// serviceNames are the gRPC health service names reported besides "".
var serviceNames = []string{
	storev1.KVService_ServiceDesc.ServiceName,
	storev1.WatchService_ServiceDesc.ServiceName,
	storev1.MaintenanceService_ServiceDesc.ServiceName,
	storev1.ClusterService_ServiceDesc.ServiceName,
}

func (a *App) setHealth(s healthpb.HealthCheckResponse_ServingStatus) {
	a.health.SetServingStatus("", s)
	for _, n := range serviceNames {
		a.health.SetServingStatus(n, s)
	}
}

// updateHealth sets the gRPC health status (and so /readyz) from
// readiness, logging each change.
func (a *App) updateHealth(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, healthInterval)
	defer cancel()
	lag, err := a.readiness(ctx)
	a.lag.Store(lag)
	if err == nil {
		a.setHealth(healthpb.HealthCheckResponse_SERVING)
	} else {
		a.setHealth(healthpb.HealthCheckResponse_NOT_SERVING)
	}
	if was := a.ready.Swap(err == nil); was != (err == nil) {
		if err == nil {
			a.log.Info("member ready", "lag_entries", lag)
		} else {
			a.log.Info("member not ready", "reason", err.Error())
		}
	}
}

// readiness returns nil when this member is ready to serve: it is in the
// raft configuration, the group has a leader, the state machine has not
// failed, and the member has caught up — its raft applied index trails
// the leader's commit index by at most cfg.ReadyMaxLag entries. The
// leader's commit index comes from ClusterService.ReadIndex, which the
// leader answers after confirming its leadership with a heartbeat round
// (forwarded there from other members), so a leader cut off from the
// quorum is not ready either. It also returns the lag it measured.
func (a *App) readiness(ctx context.Context) (uint64, error) {
	st := a.node.Status()
	switch {
	case a.fsm.Err() != nil:
		return 0, fmt.Errorf("state machine failed: %w", a.fsm.Err())
	case !st.Member:
		return 0, errors.New("not in the raft configuration")
	case st.LeaderID == "":
		return 0, errors.New("no leader")
	}
	ri, err := a.srv.Cluster().ReadIndex(ctx, &storev1.ReadIndexRequest{})
	if err != nil {
		return 0, fmt.Errorf("leader's commit index: %w", err)
	}
	lag := a.node.Lag(ri.GetIndex())
	if lag > a.cfg.ReadyMaxLag {
		return lag, fmt.Errorf("catching up: applied index %d entries behind the leader's commit index %d (ready within %d)", lag, ri.GetIndex(), a.cfg.ReadyMaxLag)
	}
	return lag, nil
}

func (a *App) watchHealth(ctx context.Context) {
	t := time.NewTicker(healthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			a.updateHealth(ctx)
		}
	}
}

func (a *App) dbSize() int64 { return int64(a.db.Metrics().DiskSpaceUsage()) }

func (a *App) registerMetrics(reg prometheus.Registerer) error {
	if reg == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meridian_store_db_size_bytes", Help: "On-disk size of the store's pebble DB.",
		}, func() float64 { return float64(a.dbSize()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "etcd_mvcc_db_total_size_in_bytes", Help: "Total size of the underlying database physically allocated in bytes (etcd's name; the pebble DB's on-disk size).",
		}, func() float64 { return float64(a.dbSize()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meridian_store_block_cache_bytes", Help: "Bytes of blocks the store's pebble block cache holds (resident memory, at most meridian_store_block_cache_capacity_bytes).",
		}, func() float64 { return float64(a.db.Metrics().BlockCache.Size) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meridian_store_block_cache_capacity_bytes", Help: "Capacity of the store's pebble block cache (Config.CacheBytes).",
		}, func() float64 { return float64(a.cfg.CacheBytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meridian_store_ready_lag_entries", Help: "Raft log entries this member's applied index trailed the leader's commit index at the last readiness check (ready within --ready-max-lag).",
		}, func() float64 { return float64(a.lag.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meridian_store_current_revision", Help: "Current store revision.",
		}, func() float64 { return float64(a.store.Rev()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "meridian_store_compact_revision", Help: "Compacted store revision.",
		}, func() float64 { return float64(a.store.CompactRev()) }),
	} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("store: register metrics: %w", err)
		}
	}
	return nil
}

// Serve serves the gRPC API on lis until Close, then returns nil.
func (a *App) Serve(lis net.Listener) error {
	a.mu.Lock()
	closed := a.closed
	a.mu.Unlock()
	if closed {
		_ = lis.Close()
		return nil
	}
	err := a.grpc.Serve(lis)
	a.mu.Lock()
	closed = a.closed
	a.mu.Unlock()
	if closed || errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// ConsistentRevision returns the store's current revision, read
// linearizably, for a reader in this process (the all-in-one's
// watchfanout): what a linearizable Range's header reports, without the
// call. The App must be open (New returned it).
func (a *App) ConsistentRevision(ctx context.Context) (int64, error) {
	return a.srv.ConsistentRevision(ctx)
}

// GRPCServer returns the gRPC server, for the caller to register more
// services (before Serve).
func (a *App) GRPCServer() *grpc.Server { return a.grpc }

// Health returns the gRPC health server and the names besides "" whose
// status is the member's readiness, re-evaluated every second: SERVING
// while readiness holds (a leader, a state machine that has not failed,
// caught up with the leader's commit index), NOT_SERVING otherwise and
// once Close started (daemon.Server; /readyz on --metrics-listen).
func (a *App) Health() (*health.Server, []string) { return a.health, serviceNames }

// Close stops gracefully: health NOT_SERVING, watchers cancelled, gRPC
// drained (bounded), background work stopped, raft shut down, pebble
// closed. Idempotent and safe to call twice.
func (a *App) Close() error {
	a.closeOnce.Do(func() {
		a.mu.Lock()
		a.closed = true
		a.mu.Unlock()
		a.closeErr = a.closeParts()
		a.log.Info("store stopped")
	})
	return a.closeErr
}

// fatalLog stops the process when the raft log cannot be synced (or a
// failed append undone), as pebbleLogger.Fatalf does for pebble's WAL: a
// failed fsync cannot be retried (package raftwal), and nothing
// acknowledged is lost by stopping.
func (a *App) fatalLog(err error) {
	a.log.Error("raft log write failed; stopping", "error", err, "fatal", true)
	panic(err)
}

// closeParts releases whatever open or New managed to create.
func (a *App) closeParts() error {
	var errs []error
	if a.health != nil {
		a.health.Shutdown()
	}
	if a.hub != nil {
		a.hub.Close() // ends watch streams so the graceful stop can finish
	}
	if a.grpc != nil {
		done := make(chan struct{})
		go func() { a.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(gracefulStopTimeout):
			a.grpc.Stop()
			<-done
		}
	}
	if a.cancel != nil {
		a.cancel()
	}
	a.wg.Wait()
	if a.srv != nil {
		a.srv.Close()
	}
	if a.node != nil {
		if err := a.node.Shutdown(); err != nil {
			errs = append(errs, fmt.Errorf("store: raft shutdown: %w", err))
		}
	}
	if a.db != nil {
		if err := a.db.Close(); err != nil {
			errs = append(errs, fmt.Errorf("store: close pebble: %w", err))
		}
	}
	if a.reg != nil {
		a.reg.unregisterAll()
	}
	return errors.Join(errs...)
}
