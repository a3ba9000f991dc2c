package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/app"
	"github.com/meridian-cp/meridian/services/store/internal/mvcc"
)

// saveSnapshot streams a backup (MaintenanceService.Snapshot) into file:
// written to file.part, checked (checksum), synced, then renamed, so that
// file is either absent or a complete backup.
func saveSnapshot(ctx context.Context, c storev1.MaintenanceServiceClient, file string, out io.Writer) (err error) {
	stream, err := c.Snapshot(ctx, &storev1.SnapshotRequest{})
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	part := file + ".part"
	f, err := os.OpenFile(part, os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(part)
		}
	}()
	w := bufio.NewWriterSize(f, 1<<20)
	var rev, size int64
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("snapshot: receive: %w", err)
		}
		rev = resp.GetHeader().GetRevision()
		n, err := w.Write(resp.GetBlob())
		size += int64(n)
		if err != nil {
			return fmt.Errorf("snapshot: write %s: %w", part, err)
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("snapshot: write %s: %w", part, err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if err := mvcc.VerifyBackup(bufio.NewReaderSize(f, 1<<20), size); err != nil {
		return fmt.Errorf("snapshot: received backup is invalid: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("snapshot: sync %s: %w", part, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("snapshot: close %s: %w", part, err)
	}
	if err := os.Rename(part, file); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	if d, err := os.Open(filepath.Dir(file)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	fmt.Fprintf(out, "snapshot of revision %d saved to %s (%d bytes)\n", rev, file, size)
	return nil
}

// restoreSnapshot creates a new data directory from a backup, offline.
// With skipPresent, a data directory that already holds a store is left
// as it is: the member restored earlier and has run since.
func restoreSnapshot(file, dataDir string, skipPresent bool, out io.Writer) error {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rev, err := app.RestoreSnapshot(file, dataDir, log)
	if skipPresent && errors.Is(err, app.ErrDataDirHoldsStore) {
		fmt.Fprintf(out, "%s already holds a store: not restored\n", dataDir)
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "restored revision %d into %s\nstart it with: store --data-dir %s (a new single-member cluster; or start every member restored from this file with the same --initial-cluster)\n",
		rev, dataDir, dataDir)
	return nil
}
