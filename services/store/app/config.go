// Package app is the store's exported entry point, used by the store binary
// (cmd/store) and by the all-in-one binary: it opens pebble, starts the raft
// node, and serves the storev1 gRPC API.
package app

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/meridian-cp/meridian/services/store/internal/raftnode"
)

// Defaults of Config fields.
const (
	DefaultID                  = "store-0"
	DefaultMaxValueBytes       = 3 << 19 // 1.5 MiB
	DefaultProgressInterval    = 5 * time.Second
	DefaultCompactionRetention = 5 * time.Minute
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
	// DataDir/db) and raft snapshots (DataDir/snapshots). Required.
	DataDir string
	// PeerAddress is the raft transport address. Empty (the single-node
	// default) uses raft's in-memory transport: nothing listens and no
	// other member can join. Otherwise raft's TCP transport binds to and
	// advertises it, so it must be "ip:port" with a concrete IP and a
	// non-zero port (":0" cannot be advertised).
	PeerAddress string
	// Bootstrap bootstraps a single-voter cluster when the data dir is new.
	Bootstrap bool
	// TLS is the gRPC server TLS config (set ClientAuth for mTLS); nil
	// serves plaintext, for tests only.
	TLS *tls.Config
	// Registerer receives the store's metrics; nil registers none. Close
	// unregisters them.
	Registerer prometheus.Registerer
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
	// GRPCServerOptions are added to the gRPC server's options
	// (interceptors, stats handlers).
	GRPCServerOptions []grpc.ServerOption
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
	if c.ID == "" {
		c.ID = DefaultID
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxValueBytes == 0 {
		c.MaxValueBytes = DefaultMaxValueBytes
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = DefaultProgressInterval
	}
	if c.CompactionRetention == 0 {
		c.CompactionRetention = DefaultCompactionRetention
	}
	return c
}
