package disk

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// statfsFS reports a settable amount of free space; files are real.
type statfsFS struct {
	vfs.FS
	avail atomic.Uint64
}

func (f *statfsFS) GetDiskUsage(string) (vfs.DiskUsage, error) {
	return vfs.DiskUsage{AvailBytes: f.avail.Load()}, nil
}

func newGuard(t *testing.T, avail uint64) (*Guard, *statfsFS, string) {
	t.Helper()
	fs := &statfsFS{FS: vfs.Default}
	fs.avail.Store(avail)
	dir := t.TempDir()
	g, err := New(Options{
		FS: fs, Dir: dir, MinFreeBytes: 100 << 10, BallastBytes: 64 << 10, MaxStaleness: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return g, fs, filepath.Join(dir, BallastName)
}

func ballastSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	// fallocate keeps the apparent size at 0 on Linux; count blocks.
	if n := blocks(st); n > 0 {
		return n
	}
	return st.Size()
}

func TestReserveRefusesBelowMinFree(t *testing.T) {
	g, fs, ballast := newGuard(t, 1<<30)
	if err := g.Admit(); err != nil {
		t.Fatalf("admit with room: %v", err)
	}
	if n := ballastSize(t, ballast); n < 64<<10 {
		t.Fatalf("ballast holds %d bytes, want 64 KiB", n)
	}
	fs.avail.Store(99 << 10)
	err := g.Admit()
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "below the reserve of 100.0 KiB") {
		t.Fatalf("admit below the reserve: %v", err)
	}
	if g.Full() {
		t.Fatal("below the reserve is not a disk-full")
	}
	fs.avail.Store(100 << 10)
	if err := g.Admit(); err != nil {
		t.Fatalf("admit at the reserve: %v", err)
	}
	if got := testutil.ToFloat64(g.metrics.refused); got != 1 {
		t.Fatalf("refused counter %v, want 1", got)
	}
}

// TestAdmissionsShareOneReading: within MaxStaleness admissions decide on
// the reading taken by the first; after it, the next admission reads again.
func TestAdmissionsShareOneReading(t *testing.T) {
	fs := &statfsFS{FS: vfs.Default}
	fs.avail.Store(1 << 30)
	const staleness = 50 * time.Millisecond
	g, err := New(Options{
		FS: fs, Dir: t.TempDir(), MinFreeBytes: 100 << 10, BallastBytes: -1, MaxStaleness: staleness,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	read := time.Now()
	if err := g.Admit(); err != nil {
		t.Fatalf("admit with room: %v", err)
	}
	fs.avail.Store(99 << 10)
	if err := g.Admit(); err != nil && time.Since(read) < staleness {
		t.Fatalf("admit within %v of the reading with room: %v", staleness, err)
	}
	time.Sleep(staleness)
	if err := g.Admit(); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("admit %v after the last reading, below the reserve: %v, want ErrNoSpace", staleness, err)
	}
}

func TestDiskFullReleasesBallastUntilThereIsRoom(t *testing.T) {
	g, fs, ballast := newGuard(t, 1<<30)
	g.onDiskFull()
	if ballastSize(t, ballast) != -1 {
		t.Fatal("ballast not released")
	}
	err := g.Admit()
	if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "ENOSPC") {
		t.Fatalf("admit after ENOSPC: %v", err)
	}
	g.onDiskFull() // again, with no ballast: harmless

	// Above the reserve but not reserve + ballast: still refused.
	fs.avail.Store(150 << 10)
	g.check()
	if !g.Full() || ballastSize(t, ballast) != -1 {
		t.Fatal("re-armed without room for reserve + ballast")
	}
	fs.avail.Store(164 << 10)
	g.check()
	if g.Full() || ballastSize(t, ballast) < 64<<10 {
		t.Fatalf("not re-armed with room: full %t, ballast %d", g.Full(), ballastSize(t, ballast))
	}
	if err := g.Admit(); err != nil {
		t.Fatalf("admit after re-arming: %v", err)
	}
}

func TestBallastIsCreatedLaterWhenStartingShortOfSpace(t *testing.T) {
	g, fs, ballast := newGuard(t, 120<<10)
	if ballastSize(t, ballast) != -1 {
		t.Fatal("ballast created without room for it")
	}
	if err := g.Admit(); err != nil {
		t.Fatalf("admit above the reserve: %v", err)
	}
	fs.avail.Store(1 << 30)
	g.check()
	if ballastSize(t, ballast) < 64<<10 {
		t.Fatal("ballast not created once there was room")
	}
}

func TestDisabled(t *testing.T) {
	fs := &statfsFS{FS: vfs.Default}
	dir := t.TempDir()
	g, err := New(Options{FS: fs, Dir: dir, MinFreeBytes: -1, BallastBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Admit(); err != nil {
		t.Fatalf("admit with the reserve disabled: %v", err)
	}
	if g.FS() != vfs.FS(fs) {
		t.Fatal("FS wrapped without a ballast")
	}
	if _, err := os.Stat(filepath.Join(dir, BallastName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ballast created while disabled: %v", err)
	}
}

// blocks returns the bytes allocated to a file, 0 if unknown.
func blocks(st os.FileInfo) int64 {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return int64(s.Blocks) * 512
	}
	return 0
}
