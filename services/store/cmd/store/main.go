// Command store runs one member of meridian's raft-replicated MVCC store and
// serves the storev1 gRPC API. Its admin commands (store member list, store
// snapshot save, ...; store --help lists them) manage a running cluster.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc/health"

	"github.com/meridian-cp/meridian/lib/daemon"
	"github.com/meridian-cp/meridian/lib/memtrim"
	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/ports"
	"github.com/meridian-cp/meridian/lib/telemetry"
	"github.com/meridian-cp/meridian/services/store/app"
)

type flags struct {
	id, dataDir, listen, peerListen string
	peerAdvertise                   string
	bootstrap                       bool
	initialCluster, advertiseClient string
	join                            string
	nonVoter                        bool
	snapshotThreshold, trailingLogs uint64
	heartbeatTimeout, electionTimt  time.Duration
	commitTimeout                   time.Duration
	tlsCert, tlsKey, clientCA       string
	peerCA                          string
	metricsListen                   string
	maxValueBytes                   int
	compactionRetention             time.Duration
	logLevel                        string
	pprof                           bool
	startupTimeout                  time.Duration
	minFreeBytes, ballastBytes      int64
	readyMaxLag                     uint64
	memory                          memtrim.Options
}

// serverFlagSet defines a member's flags on a new flag set that stores
// them in f. It prints nothing: the caller reports errors and usage.
func serverFlagSet(f *flags) *flag.FlagSet {
	fs := flag.NewFlagSet("store", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&f.id, "id", app.DefaultID, "raft server id of this member")
	fs.StringVar(&f.dataDir, "data-dir", "", "directory of the raft log, snapshots and state (required)")
	fs.StringVar(&f.listen, "listen", ports.Store, "gRPC API listen address (the default is loopback only: give this host's address to serve other hosts; members on one host each need their own)")
	fs.StringVar(&f.peerListen, "peer-listen", "", "raft TCP transport address (ip:port, advertised to peers); empty = single-node in-memory transport")
	fs.StringVar(&f.peerAdvertise, "peer-advertise", "", "raft address given to peers when it differs from --peer-listen (proxy, NAT)")
	fs.BoolVar(&f.bootstrap, "bootstrap", true, "bootstrap a cluster when the data dir is new: the voters of --initial-cluster, or this member alone; ignored with --join")
	fs.StringVar(&f.initialCluster, "initial-cluster", "", "voters of a new cluster, the same on every member: id=peer-ip:port[/client-host:port],… (needs --peer-listen)")
	fs.StringVar(&f.advertiseClient, "advertise-client", "", "gRPC address other members and clients use to reach this member; default --listen when it names a concrete IP")
	fs.StringVar(&f.join, "join", "", "comma-separated gRPC addresses of members of a running cluster; a new data dir asks them to add this member")
	fs.BoolVar(&f.nonVoter, "non-voter", false, "join as a non-voting replica (with --join)")
	fs.Uint64Var(&f.snapshotThreshold, "snapshot-threshold", 0, "raft entries between snapshots; 0 = raft's default (8192)")
	fs.Uint64Var(&f.trailingLogs, "trailing-logs", 0, "raft entries kept after a snapshot; 0 = raft's default (10240)")
	fs.DurationVar(&f.heartbeatTimeout, "heartbeat-timeout", 0, "raft heartbeat timeout; 0 = 1s")
	fs.DurationVar(&f.commitTimeout, "commit-timeout", 0, "longest a follower goes without learning the commit index while no new entries flow and no nudge reaches it; 0 = 50ms")
	fs.DurationVar(&f.electionTimt, "election-timeout", 0, "raft election timeout; 0 = 1s")
	fs.StringVar(&f.peerCA, "peer-ca-file", "", "CA bundle (PEM) verifying other members' certificates when dialing them (raft, forwarding); default --client-ca-file")
	fs.StringVar(&f.tlsCert, "tls-cert-file", "", "this member's certificate (PEM, O=meridian:store-peers, server and client usage) for the gRPC API, raft and dialing other members, read again within 5s when it changes; empty = plaintext")
	fs.StringVar(&f.tlsKey, "tls-key-file", "", "server private key (PEM)")
	fs.StringVar(&f.clientCA, "client-ca-file", "", "CA bundle (PEM) for client certificates (the internal CA): clients must present a certificate it verifies (mTLS), whose organization decides what they may call; required with --tls-cert-file")
	fs.StringVar(&f.metricsListen, "metrics-listen", ports.StoreMetrics, "address of the plaintext HTTP server of /metrics and the health endpoints /livez, /readyz, /healthz (kubelet's probes); empty disables (members on one host each need their own)")
	fs.IntVar(&f.maxValueBytes, "max-value-bytes", app.DefaultMaxValueBytes, "largest value a put may write, in bytes")
	fs.DurationVar(&f.compactionRetention, "compaction-retention", app.DefaultCompactionRetention, "history kept by automatic compaction; negative disables it")
	fs.BoolVar(&f.pprof, "pprof", false, "serve net/http/pprof under /debug/pprof/ on --metrics-listen")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.memory.AddFlags(fs)
	fs.DurationVar(&f.startupTimeout, "startup-timeout", 2*time.Minute, "how long to wait for a raft leader at startup")
	fs.Int64Var(&f.minFreeBytes, "min-free-bytes", app.DefaultMinFreeBytes, "disk space reserve: writes are refused (RESOURCE_EXHAUSTED) while the data dir's filesystem has less available; negative disables")
	fs.Int64Var(&f.ballastBytes, "ballast-bytes", app.DefaultBallastBytes, "size of <data-dir>/disk-ballast, released when a write hits ENOSPC so that the store refuses writes instead of crashing; negative disables")
	fs.Uint64Var(&f.readyMaxLag, "ready-max-lag", app.DefaultReadyMaxLag, "raft log entries this member's applied index may trail the leader's commit index while /readyz says ready: a joining or restarted member is not ready until it has caught up, so a rolling update waits for it")
	return fs
}

// parseFlags parses a member's command line: flags only. It returns
// flag.ErrHelp for -h and --help, and every problem it finds otherwise.
func parseFlags(args []string) (flags, error) {
	var f flags
	fs := serverFlagSet(&f)
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unknown command %q; the commands are %s, and a member takes flags only",
			fs.Arg(0), strings.Join(commandGroups(), ", "))
	}
	var errs []error
	if f.dataDir == "" {
		errs = append(errs, errors.New("--data-dir is required"))
	}
	errs = append(errs, daemon.CheckServingTLSFlags(f.tlsCert, f.tlsKey, f.clientCA)...)
	if f.join != "" && f.peerListen == "" {
		errs = append(errs, errors.New("--join needs --peer-listen"))
	}
	return f, errors.Join(errs...)
}

func main() {
	f, code, serve := commandLine(os.Args[1:], os.Stdout, os.Stderr)
	if !serve {
		os.Exit(code)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		fmt.Fprintln(os.Stderr, "store: --log-level:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := run(context.Background(), f, log); err != nil {
		log.Error("store failed", "error", err)
		os.Exit(1)
	}
}

// run serves a member as f says until ctx is done or SIGTERM or SIGINT
// arrives, then closes it.
func run(ctx context.Context, f flags, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := f.memory.Start(ctx, log); err != nil {
		return err
	}

	tlsConfig, err := serverTLS(f, log)
	if err != nil {
		return err
	}
	reg := telemetry.NewRegistry()
	tracing, err := telemetry.TracingFromEnv(ctx, "store", log)
	if err != nil {
		return err
	}
	defer daemon.ShutdownTracing(ctx, tracing, log)

	clientTLS, err := peerClientTLS(f, log)
	if err != nil {
		return err
	}
	initial, err := app.ParseInitialCluster(f.initialCluster)
	if err != nil {
		return err
	}
	advertise := f.advertiseClient
	if advertise == "" && f.peerListen != "" {
		if host, _, err := net.SplitHostPort(f.listen); err == nil {
			if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
				advertise = f.listen
			}
		}
	}
	var join []string
	if f.join != "" {
		join = strings.Split(f.join, ",")
	}
	// Metrics and the health endpoints are served from the start (the
	// raft state while waiting for a leader is worth seeing, and /readyz
	// says not ready until the member has one), until the member is
	// closed (/readyz says not ready while it drains). A metrics address
	// in use fails the start at once, naming the flag.
	var built atomic.Pointer[app.App]
	healthSource := func() (*health.Server, []string) {
		if a := built.Load(); a != nil {
			return a.Health()
		}
		return nil, nil
	}
	if f.metricsListen != "" {
		lis, err := daemon.Listen(ctx, "metrics-listen", f.metricsListen)
		if err != nil {
			return err
		}
		httpCtx, stopHTTP := context.WithCancel(context.WithoutCancel(ctx))
		defer stopHTTP()
		if err := daemon.ServeHealth(httpCtx, lis, reg, log, f.pprof, healthSource); err != nil {
			lis.Close()
			return err
		}
		log.Info("serving metrics", "address", lis.Addr().String(), "pprof", f.pprof)
	}
	startCtx, cancel := context.WithTimeout(ctx, f.startupTimeout)
	a, err := app.New(startCtx, app.Config{
		ID:                  f.id,
		DataDir:             f.dataDir,
		PeerAddress:         f.peerListen,
		PeerAdvertise:       f.peerAdvertise,
		Bootstrap:           f.bootstrap,
		InitialCluster:      initial,
		ClientAddress:       advertise,
		Join:                join,
		NonVoter:            f.nonVoter,
		TLS:                 tlsConfig,
		TracerProvider:      tracing.Provider,
		ClientTLS:           clientTLS,
		SnapshotThreshold:   f.snapshotThreshold,
		TrailingLogs:        f.trailingLogs,
		HeartbeatTimeout:    f.heartbeatTimeout,
		CommitTimeout:       f.commitTimeout,
		ElectionTimeout:     f.electionTimt,
		Registerer:          reg,
		Logger:              log,
		MaxValueBytes:       f.maxValueBytes,
		CompactionRetention: f.compactionRetention,
		MinFreeBytes:        f.minFreeBytes,
		BallastBytes:        f.ballastBytes,
		ReadyMaxLag:         f.readyMaxLag,
	})
	cancel()
	if errors.Is(err, syscall.EADDRINUSE) {
		// The only address app.New binds is the raft transport's.
		return daemon.ListenError("peer-listen", f.peerListen, err)
	}
	if err != nil {
		return err
	}
	defer a.Close()
	built.Store(a)

	// Listen once ready: until then a client's connection is refused,
	// which it knows to retry elsewhere.
	lis, err := daemon.Listen(ctx, "listen", f.listen)
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- a.Serve(lis) }()
	log.Info("serving gRPC", "address", lis.Addr().String(), "tls", tlsConfig != nil, "mtls", f.clientCA != "")

	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err = <-errc:
	}
	return errors.Join(err, a.Close())
}

// serverTLS builds the gRPC server's TLS config from the flags; nil when
// TLS is off. Clients must present a certificate the client CA verifies.
// The certificate and key are read again when they change
// (pki.KeyPairReloader), so a renewed certificate needs no restart.
func serverTLS(f flags, log *slog.Logger) (*tls.Config, error) {
	if f.tlsCert == "" {
		return nil, nil
	}
	return pki.LoadServerTLS(f.tlsCert, f.tlsKey, f.clientCA, log)
}

// peerClientTLS builds the TLS config for dialing other members (raft
// transport, forwarding): this member's certificate as its client
// certificate, read again when it changes, verified against
// --peer-ca-file (default --client-ca-file). nil when TLS is off.
func peerClientTLS(f flags, log *slog.Logger) (*tls.Config, error) {
	if f.tlsCert == "" {
		return nil, nil
	}
	caFile := f.peerCA
	if caFile == "" {
		caFile = f.clientCA
	}
	return pki.LoadClientTLS(f.tlsCert, f.tlsKey, caFile, "", log)
}
