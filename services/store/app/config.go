// Package app is the store's exported entry point, used by the store binary
// (cmd/store) and by the all-in-one binary: it opens pebble, starts the raft
// node, and serves the storev1 gRPC API.
package app

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/meridian-cp/meridian/services/store/internal/disk"
	"github.com/meridian-cp/meridian/services/store/internal/raftnode"
)

// Defaults of Config fields.
const (
	DefaultID                  = "store-0"
	DefaultMaxValueBytes       = 3 << 19 // 1.5 MiB
	DefaultProgressInterval    = 5 * time.Second
	DefaultCompactionRetention = 5 * time.Minute
	DefaultCacheBytes          = 128 << 20
	DefaultMinFreeBytes        = disk.DefaultMinFreeBytes // 256 MiB
	DefaultBallastBytes        = disk.DefaultBallastBytes // 64 MiB
	// DefaultReadyMaxLag is how many raft log entries a member's applied
	// index may trail the leader's commit index while it reports ready:
	// a few append batches (raft sends up to 64 entries per batch), which
	// a healthy follower under load stays within.
	DefaultReadyMaxLag = 256
	// requestOverheadBytes is allowed on top of MaxValueBytes for a whole
	// request (key, compares, other ops), as etcd does.
	requestOverheadBytes = 512 << 10
)

// Config configures the store. The zero value of each field means its
// default, except DataDir, which is required.
type Config struct {
	// ID is the raft server id; default "store-0".
	ID string
	// DataDir holds the pebble DB (raft log, stable store and state, under
	// DataDir/db), raft snapshots (DataDir/snapshots) and the disk ballast
	// (DataDir/disk-ballast). Required.
	DataDir string
	// PeerAddress is the raft transport address. Empty (the single-node
	// default) uses raft's in-memory transport: nothing listens and no
	// other member can join. Otherwise raft's TCP transport binds to and
	// advertises it, so it must be "ip:port" with a concrete IP and a
	// non-zero port (":0" cannot be advertised).
	PeerAddress string
	// PeerAdvertise is the raft address given to peers when it differs
	// from PeerAddress (a proxy, NAT); default PeerAddress. Outgoing raft
	// connections are bound to PeerAddress's IP.
	PeerAdvertise string
	// Bootstrap bootstraps a cluster when the data dir is new: the voters
	// of InitialCluster, or a single voter (this member) when it is empty.
	Bootstrap bool
	// InitialCluster lists the voters of a new cluster, this member
	// included; every member is started with the same list. Needs
	// PeerAddress.
	InitialCluster []Member
	// ClientAddress is the gRPC address other members and clients use to
	// reach this member ("host:port"). It is recorded in the membership
	// keyspace through raft (at start, by this member, via the leader), and
	// is needed for other members to forward requests here when it leads.
	// Empty: not recorded (the single-node default).
	ClientAddress string
	// Join lists client addresses of members of a running cluster. A
	// member whose data dir is new (and that does not bootstrap) asks them,
	// at start, to add it (MemberAdd) with PeerAddress and ClientAddress,
	// as a non-voter when NonVoter is set. A member that lost its data dir
	// rejoins the same way and catches up by snapshot.
	Join []string
	// NonVoter joins as a non-voting replica (see Join).
	NonVoter bool
	// ClientTLS is the TLS config to dial other members: the raft
	// transport (when TLS is set, raft runs over mutual TLS with TLS as its
	// server side), forwarding to the leader and joining. Its certificate
	// must carry identity.StorePeerOrganization: raft connections from or
	// to a certificate without it are refused. Required when TLS and
	// PeerAddress are both set.
	ClientTLS *tls.Config
	// SnapshotThreshold and TrailingLogs tune raft snapshots and log
	// truncation (entries); 0 keeps raft's defaults (8192, 10240).
	SnapshotThreshold, TrailingLogs uint64
	// SnapshotInterval is how often raft checks whether to snapshot; 0
	// keeps raft's default (120s).
	SnapshotInterval time.Duration
	// HeartbeatTimeout and ElectionTimeout tune failure detection; 0 keeps
	// raft's defaults (1s each).
	HeartbeatTimeout, ElectionTimeout time.Duration
	// CommitTimeout bounds how late a follower learns that entries are
	// committed when no new entries follow them; 0 means
	// raftnode.DefaultCommitTimeout.
	CommitTimeout time.Duration
	// TLS is the gRPC server TLS config; its ClientAuth must be
	// tls.RequireAndVerifyClientCert, with the internal CA as ClientCAs:
	// every call is authorized by the organization of the caller's
	// certificate (internal/server.Access: data RPCs for the gateways and
	// the watch fan-out tier, operator RPCs for operators, forwarding for
	// members). nil serves plaintext to every caller, for tests only.
	TLS *tls.Config
	// Registerer receives the store's metrics; nil registers none. Close
	// unregisters them.
	Registerer prometheus.Registerer
	// TracerProvider traces the service's gRPC calls and its own spans
	// (lib/telemetry); nil: no tracing.
	TracerProvider trace.TracerProvider
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// MaxValueBytes caps each value written; default 1.5 MiB. A whole
	// request may be 512 KiB larger.
	MaxValueBytes int
	// ProgressInterval is the period of watch progress notifications;
	// default 5s.
	ProgressInterval time.Duration
	// CompactionRetention is how much history automatic compaction keeps;
	// 0 means the default (5m), negative disables automatic compaction.
	CompactionRetention time.Duration
	// CacheBytes is the size of pebble's block cache; default 128 MiB.
	// Every write looks up the previous version of its key, so a cache that
	// holds the index and recent blocks saves a disk read per write.
	CacheBytes int64
	// MemTableBytes is the size of pebble's memtables, which buffer
	// writes before they are flushed to tables; 0 means pebble's default,
	// 4 MiB. A store holds up to two at once while idle: the one being
	// filled and the last flushed one, which pebble keeps for reuse.
	MemTableBytes int64
	// GRPCServerOptions are added to the gRPC server's options
	// (interceptors, stats handlers).
	GRPCServerOptions []grpc.ServerOption
	// MinFreeBytes is the disk space reserve, in bytes: while the data
	// directory's filesystem has less available, writes that add data
	// (a Txn with a put or a delete, a lease grant) fail with
	// RESOURCE_EXHAUSTED before they are proposed; reads, watches,
	// compactions and lease expiry go on. Default 256 MiB; negative
	// disables the check. See package internal/disk for why the store
	// must never let its log hit ENOSPC.
	MinFreeBytes int64
	// BallastBytes is the size of DataDir/disk-ballast, space held back
	// and released when a write hits ENOSPC despite the reserve, so that
	// the write completes and the store refuses further writes instead of
	// crashing. Default 64 MiB; negative disables it.
	BallastBytes int64
	// ReadyMaxLag is how many raft log entries this member's applied
	// index may trail the leader's commit index while its gRPC health
	// (and so /readyz) says SERVING; default DefaultReadyMaxLag. A member
	// that has just joined or restarted reports NOT_SERVING until it has
	// caught up, so that a rolling update waits for it.
	ReadyMaxLag uint64

	// fs is the filesystem under the pebble DB, the raft log and the
	// ballast; nil is
	// vfs.Default. Tests inject disk faults through it.
	fs vfs.FS
	// diskCheckInterval is how often free space is polled; 0 is 1s.
	diskCheckInterval time.Duration
}

// Member is a member of the initial cluster.
type Member struct {
	// ID is the raft server id.
	ID string
	// PeerAddress is its raft transport address.
	PeerAddress string
	// ClientAddress is its gRPC address (optional; each member also
	// registers its own at start).
	ClientAddress string
}

// ParseInitialCluster parses "id=peer[/client],id=peer[/client],…".
func ParseInitialCluster(s string) ([]Member, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []Member
	for _, part := range strings.Split(s, ",") {
		id, addrs, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || id == "" || addrs == "" {
			return nil, fmt.Errorf("store: initial cluster member %q is not id=peer[/client]", part)
		}
		peer, client, _ := strings.Cut(addrs, "/")
		out = append(out, Member{ID: id, PeerAddress: peer, ClientAddress: client})
	}
	return out, nil
}

// Validate reports every problem of c at once.
func (c *Config) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("store: DataDir is required"))
	}
	if c.PeerAddress != "" {
		if _, err := raftnode.ValidatePeerAddress(c.PeerAddress); err != nil {
			errs = append(errs, fmt.Errorf("store: PeerAddress: %w", err))
		}
	}
	if c.TLS != nil && c.TLS.ClientAuth != tls.RequireAndVerifyClientCert {
		errs = append(errs, errors.New("store: TLS must require and verify client certificates (callers are authorized by them)"))
	}
	if c.TLS != nil && c.PeerAddress != "" && c.ClientTLS == nil {
		errs = append(errs, errors.New("store: ClientTLS is required with TLS and PeerAddress (raft runs over mutual TLS)"))
	}
	if len(c.InitialCluster) > 0 {
		if c.PeerAddress == "" {
			errs = append(errs, errors.New("store: InitialCluster needs PeerAddress"))
		}
		self := false
		for _, m := range c.InitialCluster {
			if m.ID == "" {
				errs = append(errs, errors.New("store: InitialCluster: a member has no id"))
			}
			if err := raftnode.CheckPeerAddress(m.PeerAddress); err != nil {
				errs = append(errs, fmt.Errorf("store: InitialCluster member %q: %w", m.ID, err))
			}
			id := c.ID
			if id == "" {
				id = DefaultID
			}
			if m.ID == id {
				self = true
				if adv := cmp.Or(c.PeerAdvertise, c.PeerAddress); m.PeerAddress != adv {
					errs = append(errs, fmt.Errorf("store: InitialCluster gives this member (%q) peer address %s, not its advertised %s", id, m.PeerAddress, cmp.Or(c.PeerAdvertise, c.PeerAddress)))
				}
			}
		}
		if !self {
			errs = append(errs, errors.New("store: InitialCluster does not include this member's ID"))
		}
	}
	if len(c.Join) > 0 && c.PeerAddress == "" {
		errs = append(errs, errors.New("store: Join needs PeerAddress"))
	}
	if c.MaxValueBytes < 0 {
		errs = append(errs, fmt.Errorf("store: MaxValueBytes %d is negative", c.MaxValueBytes))
	}
	if c.MaxValueBytes > 64<<20 {
		errs = append(errs, fmt.Errorf("store: MaxValueBytes %d is above 64 MiB", c.MaxValueBytes))
	}
	if c.ProgressInterval < 0 {
		errs = append(errs, fmt.Errorf("store: ProgressInterval %v is negative", c.ProgressInterval))
	}
	return errors.Join(errs...)
}

// withDefaults returns c with defaults filled in.
func (c Config) withDefaults() Config {
	c.ID = cmp.Or(c.ID, DefaultID)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.CacheBytes <= 0 {
		c.CacheBytes = DefaultCacheBytes
	}
	c.MaxValueBytes = cmp.Or(c.MaxValueBytes, DefaultMaxValueBytes)
	c.ProgressInterval = cmp.Or(c.ProgressInterval, DefaultProgressInterval)
	c.CompactionRetention = cmp.Or(c.CompactionRetention, DefaultCompactionRetention)
	c.ReadyMaxLag = cmp.Or(c.ReadyMaxLag, DefaultReadyMaxLag)
	return c
}
