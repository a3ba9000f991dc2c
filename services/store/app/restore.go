package app

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/meridian-cp/meridian/services/store/internal/disk"
	"github.com/meridian-cp/meridian/services/store/internal/mvcc"
)

// ErrDataDirHoldsStore is returned by RestoreSnapshot when the data
// directory already holds a store (it is left as it is).
var ErrDataDirHoldsStore = errors.New("the data directory already holds a store")

// RestoreSnapshot creates the state of a new store in dataDir from a backup
// file (MaintenanceService.Snapshot, `store snapshot save`), as etcdutl
// snapshot restore does, and returns the restored revision. dataDir must
// not hold a store yet.
//
// The backup's checksum is verified before anything is written. The state
// (keys, history down to the compacted revision, leases) is restored
// without the raft identity of the cluster it came from: no raft log, no
// membership, applied index 0. Starting a store on dataDir then
// bootstraps a new raft group (Config.Bootstrap) whose log starts at index
// 1 on top of the restored state: a single member, or the voters of
// Config.InitialCluster if every one of them was restored from the same
// backup. Revisions continue from the restored one.
//
// The DB is built in dataDir/db.restoring and renamed to dataDir/db only
// when complete, so an interrupted restore leaves no store behind.
func RestoreSnapshot(file, dataDir string, log *slog.Logger) (int64, error) {
	if log == nil {
		log = slog.Default()
	}
	dbDir := filepath.Join(dataDir, "db")
	for _, d := range []string{dbDir, filepath.Join(dataDir, "snapshots"), filepath.Join(dataDir, "raft")} {
		if entries, err := os.ReadDir(d); err == nil && len(entries) > 0 {
			return 0, fmt.Errorf("store: restore: %s: %w; restore into an empty data directory", dataDir, ErrDataDirHoldsStore)
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("store: restore: %w", err)
		}
	}
	f, err := os.Open(file)
	if err != nil {
		return 0, fmt.Errorf("store: restore: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("store: restore: %w", err)
	}
	if err := mvcc.VerifyBackup(bufio.NewReaderSize(f, 1<<20), st.Size()); err != nil {
		return 0, fmt.Errorf("store: restore %s: %w", file, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, fmt.Errorf("store: restore: %w", err)
	}

	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return 0, fmt.Errorf("store: restore: %w", err)
	}
	tmp := dbDir + ".restoring"
	if err := os.RemoveAll(tmp); err != nil {
		return 0, fmt.Errorf("store: restore: %w", err)
	}
	rev, err := restoreInto(tmp, io.LimitReader(f, st.Size()-mvcc.BackupChecksumSize), log)
	if err != nil {
		_ = os.RemoveAll(tmp)
		return 0, err
	}
	if err := os.Rename(tmp, dbDir); err != nil {
		return 0, fmt.Errorf("store: restore: %w", err)
	}
	if err := disk.SyncDir(vfs.Default, dataDir); err != nil {
		return 0, err
	}
	log.Info("snapshot restored", "file", file, "data_dir", dataDir, "revision", rev)
	return rev, nil
}

// restoreInto creates a pebble DB in dir holding the snapshot stream r,
// prepared for a new raft group.
func restoreInto(dir string, r io.Reader, log *slog.Logger) (rev int64, err error) {
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{log}})
	if err != nil {
		return 0, fmt.Errorf("store: restore: open pebble: %w", err)
	}
	defer func() {
		if cerr := db.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("store: restore: close pebble: %w", cerr)
		}
	}()
	s, err := mvcc.Open(db, nil)
	if err != nil {
		return 0, err
	}
	if err := s.Restore(r); err != nil {
		return 0, fmt.Errorf("store: restore: %w", err)
	}
	if err := s.ResetForNewCluster(); err != nil {
		return 0, fmt.Errorf("store: restore: %w", err)
	}
	return s.Rev(), nil
}
