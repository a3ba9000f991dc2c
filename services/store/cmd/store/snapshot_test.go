package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/app"
	"github.com/meridian-cp/meridian/services/store/client"
)

// serve starts a single-member store on dataDir and returns its address.
func serve(t *testing.T, dataDir string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := app.New(ctx, app.Config{DataDir: dataDir, Bootstrap: true, CompactionRetention: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return daemontest.Serve(t, a).Addr
}

func TestSnapshotSaveAndRestoreCommands(t *testing.T) {
	addr := serve(t, t.TempDir())
	c, err := client.Dial([]string{addr}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for _, kv := range [][2]string{{"a", "1"}, {"b", "2"}, {"a", "3"}} {
		op := &storev1.RequestOp{Request: &storev1.RequestOp_RequestPut{RequestPut: &storev1.PutRequest{Key: []byte(kv[0]), Value: []byte(kv[1])}}}
		if _, err := c.KV().Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{op}}); err != nil {
			t.Fatal(err)
		}
	}

	file := filepath.Join(t.TempDir(), "backup.snap")
	var out bytes.Buffer
	if err := cli([]string{"snapshot", "save", file, "--endpoints", addr}, &out); err != nil {
		t.Fatalf("snapshot save: %v", err)
	}
	if !strings.Contains(out.String(), "snapshot of revision 3 saved to "+file) {
		t.Fatalf("snapshot save printed %q", out.String())
	}
	if _, err := os.Stat(file + ".part"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary file left behind: %v", err)
	}

	var usage *usageError
	if err := cli([]string{"snapshot", "restore", file}, &out); !errors.As(err, &usage) {
		t.Fatalf("restore without --data-dir: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "restored")
	out.Reset()
	if err := cli([]string{"snapshot", "restore", file, "--data-dir", dir}, &out); err != nil {
		t.Fatalf("snapshot restore: %v", err)
	}
	if !strings.Contains(out.String(), "restored revision 3 into "+dir) {
		t.Fatalf("snapshot restore printed %q", out.String())
	}
	// Again into the same directory: refused, or, with --skip-if-present
	// (the chart's restore init container runs at every start), left as
	// it is.
	if err := cli([]string{"snapshot", "restore", file, "--data-dir", dir}, &out); err == nil || !strings.Contains(err.Error(), "already holds a store") {
		t.Fatalf("a second restore into %s: %v, want a refusal", dir, err)
	}
	out.Reset()
	if err := cli([]string{"snapshot", "restore", file, "--data-dir", dir, "--skip-if-present"}, &out); err != nil {
		t.Fatalf("restore --skip-if-present into a restored directory: %v", err)
	}
	if want := dir + " already holds a store: not restored\n"; out.String() != want {
		t.Fatalf("restore --skip-if-present printed %q, want %q", out.String(), want)
	}

	addr2 := serve(t, dir)
	c2, err := client.Dial([]string{addr2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	for rev, want := range map[int64]string{1: "a=1", 2: "a=1 b=2", 3: "a=3 b=2"} {
		resp, err := c2.KV().Range(ctx, &storev1.RangeRequest{Key: []byte("a"), RangeEnd: []byte("c"), Revision: rev})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, kv := range resp.GetKvs() {
			got = append(got, string(kv.GetKey())+"="+string(kv.GetValue()))
		}
		if strings.Join(got, " ") != want {
			t.Fatalf("restored store at revision %d: %v, want %s", rev, got, want)
		}
	}
}
