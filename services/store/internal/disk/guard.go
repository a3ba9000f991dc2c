// Package disk keeps a full disk from corrupting or crashing the store: it
// refuses writes before the disk fills, and survives the ENOSPC that slips
// through anyway.
//
// # What the libraries do on ENOSPC
//
// pebble (v2.1): a failed write or fsync of the WAL or of the MANIFEST is
// fatal. DB.Apply calls Logger.Fatalf("pebble: fatal commit error") when a
// commit fails (the commit pipeline is left unusable, and the batch may
// already be visible in the memtable), and the MANIFEST writer calls
// Fatalf too; the store's pebble logger panics. A failed fsync cannot be
// retried either: after it the kernel may have dropped the dirty pages, so
// a later fsync "succeeds" without them (PostgreSQL's "fsyncgate"; pebble's
// vfs.OnDiskFull documents the same and never retries a Sync). Failed
// sstable writes (flushes, compactions) are background errors that pebble
// retries.
//
// hashicorp/raft (v1.8): a leader whose StoreLogs fails answers the waiting
// futures with the error (raft.LogCache wraps it with %q, so errors.Is no
// longer finds ENOSPC) and steps down; a follower drops the entries and
// fails the AppendEntries; and at the next election raft panics if it
// cannot persist the term (setCurrentTerm). The raft log (package raftwal,
// segments allocated in full when created, so appends do not allocate)
// stops the process like pebble when an append cannot be undone or a sync
// fails, and otherwise returns the error to raft.
//
// So the store cannot ride out ENOSPC in its log or state: bytes must not
// run out. A Guard does three things:
//
//  1. Reserve. Writes that add data (a Txn with a put or a delete, a lease
//     grant) are refused before they are proposed, with ErrNoSpace (gRPC
//     RESOURCE_EXHAUSTED), while the data directory's filesystem has less
//     than MinFreeBytes available (statfs, read for admissions at most once
//     per MaxStaleness, and every CheckInterval). Reads, watches,
//     compactions, lease revocations (expiry must keep working) and
//     membership changes continue: they are small, compaction is what frees
//     space, and the reserve is their headroom.
//  2. Ballast. A file of BallastBytes in the data directory holds space
//     back. If a write hits ENOSPC anyway (another process filled the disk
//     between two checks, a burst larger than the reserve, a filesystem
//     whose statfs is optimistic), pebble's vfs.OnDiskFull (under the
//     pebble DB and the raft log's segments alike) blocks every new write
//     and calls the guard, which deletes the ballast and latches
//     "full"; pebble then retries the failed write once, and it succeeds.
//     Writes stay refused until MinFreeBytes+BallastBytes are available,
//     then the ballast is re-created and writes are admitted again, without
//     a restart. This is the scheme pebble's OnDiskFull was built for
//     (CockroachDB's ballast).
//  3. Otherwise (ENOSPC from fsync, or more than the ballast could absorb)
//     pebble's fatal error stops the process. Nothing is lost or corrupted:
//     a write is acknowledged only after its raft entry was synced, and
//     pebble's recovery drops the torn tail of its last WAL. Until space is
//     freed, the restart fails in pebble.Open with ENOSPC.
//
// The guard sees only this member's disk. In a cluster, the leader's guard
// decides admission; a follower whose disk fills while the leader's does
// not stops at (3) and catches up after its restart.
package disk

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
)

// ErrNoSpace is wrapped by every refusal: not enough free disk space to
// accept writes. The server maps it to RESOURCE_EXHAUSTED.
var ErrNoSpace = errors.New("disk: not enough free disk space for writes")

// Defaults of Options fields.
const (
	DefaultMinFreeBytes  = 256 << 20
	DefaultBallastBytes  = 64 << 20
	DefaultCheckInterval = time.Second
	DefaultMaxStaleness  = 10 * time.Millisecond
	// BallastName is the ballast's file name in the data directory.
	BallastName = "disk-ballast"
)

// Options configure a Guard. The zero value of each field means its
// default.
type Options struct {
	// FS is the filesystem of the data directory, unwrapped: the guard
	// reads free space (GetDiskUsage) and manages the ballast through it,
	// and FS() wraps it for pebble. Default vfs.Default.
	FS vfs.FS
	// Dir is the data directory (required); the ballast is Dir/BallastName.
	Dir string
	// MinFreeBytes is the reserve, in bytes: writes are refused while less
	// is available. Default 256 MiB; negative disables the check.
	MinFreeBytes int64
	// BallastBytes is the ballast's size, in bytes. Default 64 MiB;
	// negative disables the ballast (an ENOSPC is then always fatal).
	BallastBytes int64
	// CheckInterval is how often free space is polled (metrics, and
	// re-arming after a disk-full); default 1s.
	CheckInterval time.Duration
	// MaxStaleness bounds the age of the free-space reading an admission
	// decides on: admissions within it share one statfs. Default 10ms;
	// negative reads free space for every admission.
	//
	// Why: a statfs per write puts a system call on the path of every
	// write, at thousands of writes a second. What ten milliseconds of
	// writes add is far below the reserve, and the ballast stands behind
	// the reserve anyway (an admission is not atomic with its write).
	MaxStaleness time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Registerer receives the guard's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Guard admits writes while the disk has room; see the package
// documentation. Its methods are safe for concurrent use.
type Guard struct {
	opts    Options
	ballast string
	metrics *metrics

	// full is set by onDiskFull (an ENOSPC released the ballast) and
	// cleared by check once the ballast is back.
	full atomic.Bool
	// avail is the last available byte count read (admissions, metrics,
	// messages).
	avail atomic.Uint64
	// readAt is when an admission last read free space, as time since
	// start; the admission that moves it reads, the others use avail.
	readAt atomic.Int64
	start  time.Time
	// bmu serialises creating and removing the ballast.
	bmu sync.Mutex
	// hasBallast is true while the ballast file holds its space; guarded
	// by bmu.
	hasBallast bool
}

// New returns a guard for opts.Dir and allocates the ballast if it is
// missing and the space allows (otherwise check retries later).
func New(opts Options) (*Guard, error) {
	if opts.Dir == "" {
		return nil, errors.New("disk: Dir is required")
	}
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	if opts.MinFreeBytes == 0 {
		opts.MinFreeBytes = DefaultMinFreeBytes
	}
	if opts.BallastBytes == 0 {
		opts.BallastBytes = DefaultBallastBytes
	}
	if opts.CheckInterval <= 0 {
		opts.CheckInterval = DefaultCheckInterval
	}
	if opts.MaxStaleness == 0 {
		opts.MaxStaleness = DefaultMaxStaleness
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	g := &Guard{opts: opts, ballast: opts.FS.PathJoin(opts.Dir, BallastName), start: time.Now()}
	// The first admission reads.
	g.readAt.Store(-int64(opts.MaxStaleness))
	m, err := newMetrics(opts.Registerer, g)
	if err != nil {
		return nil, err
	}
	g.metrics = m
	if opts.BallastBytes > 0 {
		if _, err := opts.FS.Stat(g.ballast); err == nil {
			// Present from an earlier run: make sure it holds its full
			// size (BallastBytes may have grown).
			if err := g.allocateBallast(); err != nil {
				opts.Logger.Warn("could not extend the disk ballast", "path", g.ballast, "error", err)
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("disk: stat ballast: %w", err)
		}
	}
	g.check()
	return g, nil
}

// FS returns the filesystem pebble must use: opts.FS, wrapped so that an
// ENOSPC releases the ballast and the failed write is retried once.
func (g *Guard) FS() vfs.FS {
	if g.opts.BallastBytes <= 0 {
		return g.opts.FS
	}
	return vfs.OnDiskFull(g.opts.FS, g.onDiskFull)
}

// Admit returns nil if a write that adds data may be proposed, or an error
// wrapping ErrNoSpace that says why not and what frees it.
func (g *Guard) Admit() error {
	if g.full.Load() {
		g.metrics.refused.Inc()
		return fmt.Errorf("%w: a write failed with ENOSPC (no space left on device) and the %s disk ballast was released to complete it; "+
			"writes are refused until %s (reserve + ballast) are available on the data directory's filesystem, %s now; reads and watches are served",
			ErrNoSpace, size(g.opts.BallastBytes), size(g.rearmBytes()), size(int64(g.avail.Load())))
	}
	if g.opts.MinFreeBytes <= 0 {
		return nil
	}
	avail, err := g.admissionReading()
	if err != nil {
		// statfs failing is not a reason to refuse writes: the ballast
		// and pebble's own errors still stand behind this check.
		g.opts.Logger.Warn("reading free disk space", "dir", g.opts.Dir, "error", err)
		return nil
	}
	if avail < uint64(g.opts.MinFreeBytes) {
		g.metrics.refused.Inc()
		return fmt.Errorf("%w: %s available on the data directory's filesystem (%s), below the reserve of %s (--min-free-bytes); "+
			"writes are refused until space is freed (compaction frees history), reads and watches are served",
			ErrNoSpace, size(int64(avail)), g.opts.Dir, size(g.opts.MinFreeBytes))
	}
	return nil
}

// Full reports whether writes are refused because an ENOSPC released the
// ballast (not merely because free space is below the reserve).
func (g *Guard) Full() bool { return g.full.Load() }

// Run polls free space every CheckInterval until done is closed: it
// refreshes the metrics and, once there is room, re-creates the ballast and
// admits writes again after a disk-full.
func (g *Guard) Run(done <-chan struct{}) {
	t := time.NewTicker(g.opts.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			g.check()
		}
	}
}

// check reads free space and re-creates a missing ballast when
// MinFreeBytes+BallastBytes are available, which ends a disk-full.
func (g *Guard) check() {
	avail, err := g.available()
	if err != nil {
		g.opts.Logger.Warn("reading free disk space", "dir", g.opts.Dir, "error", err)
		return
	}
	if g.opts.BallastBytes <= 0 {
		if g.full.Load() && avail >= uint64(g.rearmBytes()) {
			g.full.Store(false)
			g.opts.Logger.Info("disk space is available again; writes are admitted", "available_bytes", avail)
		}
		return
	}
	g.bmu.Lock()
	defer g.bmu.Unlock()
	if g.hasBallast || avail < uint64(g.rearmBytes()) {
		return
	}
	if err := g.allocateBallast(); err != nil {
		g.opts.Logger.Warn("could not create the disk ballast", "path", g.ballast, "error", err)
		_ = g.opts.FS.Remove(g.ballast)
		return
	}
	if g.full.Swap(false) {
		g.opts.Logger.Info("disk space is available again; ballast re-created, writes are admitted",
			"available_bytes", avail, "ballast_bytes", g.opts.BallastBytes)
	}
}

// rearmBytes is the space needed to leave a disk-full: the reserve plus
// the ballast.
func (g *Guard) rearmBytes() int64 {
	return max(g.opts.MinFreeBytes, 0) + max(g.opts.BallastBytes, 0)
}

// admissionReading returns free space read at most MaxStaleness ago.
func (g *Guard) admissionReading() (uint64, error) {
	if g.opts.MaxStaleness > 0 {
		now, last := int64(time.Since(g.start)), g.readAt.Load()
		if now-last < int64(g.opts.MaxStaleness) || !g.readAt.CompareAndSwap(last, now) {
			return g.avail.Load(), nil
		}
	}
	return g.available()
}

func (g *Guard) available() (uint64, error) {
	du, err := g.opts.FS.GetDiskUsage(g.opts.Dir)
	if err != nil {
		return 0, fmt.Errorf("disk: usage of %s: %w", g.opts.Dir, err)
	}
	g.avail.Store(du.AvailBytes)
	return du.AvailBytes, nil
}

// onDiskFull is pebble's disk-full callback (vfs.OnDiskFull): it runs while
// every new write of the DB waits, so it only latches and deletes.
func (g *Guard) onDiskFull() {
	first := !g.full.Swap(true)
	g.bmu.Lock()
	released := false
	if g.opts.BallastBytes > 0 {
		// Also when hasBallast is false: a partial ballast may exist.
		err := g.opts.FS.Remove(g.ballast)
		released = err == nil
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			g.opts.Logger.Error("could not remove the disk ballast", "path", g.ballast, "error", err)
		}
		g.hasBallast = false
	}
	g.bmu.Unlock()
	if first || released {
		g.opts.Logger.Error("disk full: a write failed with ENOSPC; writes are refused until space is freed",
			"dir", g.opts.Dir, "ballast_released", released, "ballast_bytes", g.opts.BallastBytes, "needed_bytes", g.rearmBytes())
	}
}

// allocateBallast creates (or extends) the ballast file to BallastBytes and
// syncs it. On Linux it is allocated with fallocate (no data written);
// elsewhere, or where fallocate is not supported, zeros are written.
// Callers hold bmu or run before the guard is shared.
func (g *Guard) allocateBallast() error {
	f, err := g.opts.FS.OpenReadWrite(g.ballast, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("disk: open ballast: %w", err)
	}
	n := g.opts.BallastBytes
	if err := preallocate(f, n); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("disk: sync ballast: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("disk: close ballast: %w", err)
	}
	if err := SyncDir(g.opts.FS, g.opts.Dir); err != nil {
		return err
	}
	g.hasBallast = true
	return nil
}

func preallocate(f vfs.File, n int64) error {
	if runtime.GOOS == "linux" {
		if err := f.Preallocate(0, n); err == nil {
			return nil
		}
	}
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("disk: stat ballast: %w", err)
	}
	zeros := make([]byte, 1<<20)
	for off := st.Size(); off < n; {
		c := min(int64(len(zeros)), n-off)
		if _, err := f.WriteAt(zeros[:c], off); err != nil {
			return fmt.Errorf("disk: write ballast: %w", err)
		}
		off += c
	}
	return nil
}

// SyncDir makes the entries of dir durable: the files created, renamed or
// removed in it since they were last synced. The store's data directory,
// the raft log's segment directory and the disk guard's ballast each need
// it after such a change.
func SyncDir(fsys vfs.FS, dir string) error {
	d, err := fsys.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("disk: open %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("disk: sync %s: %w", dir, err)
	}
	return nil
}

// size formats a byte count for messages.
func size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
