package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/mvcc"
)

// saveBackup reads MaintenanceService.Snapshot into file and returns the
// revision of every chunk's header and the number of chunks.
func saveBackup(t *testing.T, m *member, file string) (rev int64, chunks int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := m.maint.Snapshot(ctx, &storev1.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("snapshot stream: %v", err)
		}
		if chunks > 0 && resp.GetHeader().GetRevision() != rev {
			t.Fatalf("chunk %d at revision %d, first at %d", chunks, resp.GetHeader().GetRevision(), rev)
		}
		rev = resp.GetHeader().GetRevision()
		if len(resp.GetBlob()) > 1<<20 {
			t.Fatalf("chunk of %d bytes", len(resp.GetBlob()))
		}
		buf.Write(resp.GetBlob())
		chunks++
	}
	if err := mvcc.VerifyBackup(bytes.NewReader(buf.Bytes()), int64(buf.Len())); err != nil {
		t.Fatalf("received backup: %v", err)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return rev, chunks
}

// TestSnapshotSaveRestoreServesEveryRevision saves a backup over gRPC while
// writes continue, restores it into a new data directory, starts a store on
// it and compares every readable revision, the watch history, leases and
// the next revision with the original.
func TestSnapshotSaveRestoreServesEveryRevision(t *testing.T) {
	m := start(t, testConfig(t))
	ctx := context.Background()
	for i := range 30 {
		m.put(t, fmt.Sprintf("k/%02d", i%10), fmt.Sprint(i))
	}
	big := strings.Repeat("b", 1<<20)
	for i := range 3 {
		m.put(t, fmt.Sprintf("big/%d", i), big)
	}
	del := &storev1.RequestOp{Request: &storev1.RequestOp_RequestDeleteRange{RequestDeleteRange: &storev1.DeleteRangeRequest{Key: []byte("k/03")}}}
	if _, err := m.kv.Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{del}}); err != nil {
		t.Fatal(err)
	}
	lease, err := storev1.NewLeaseServiceClient(m.conn).LeaseGrant(ctx, &storev1.LeaseGrantRequest{Ttl: durationpb.New(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	leased := put("leased", "v")
	leased.GetRequestPut().Lease = lease.GetId()
	if _, err := m.kv.Txn(ctx, &storev1.TxnRequest{Success: []*storev1.RequestOp{leased}}); err != nil {
		t.Fatal(err)
	}
	const compactRev = 12
	if _, err := m.kv.Compact(ctx, &storev1.CompactRequest{Revision: compactRev}); err != nil {
		t.Fatal(err)
	}

	file := filepath.Join(t.TempDir(), "backup.snap")
	rev, chunks := saveBackup(t, m, file)
	if want := m.rng(t, &storev1.RangeRequest{Key: []byte("k"), CountOnly: true}).GetHeader().GetRevision(); rev != want {
		t.Fatalf("backup at revision %d, store at %d", rev, want)
	}
	if chunks < 3 {
		t.Fatalf("a 3 MiB backup came in %d chunks", chunks)
	}
	m.put(t, "after-backup", "x")

	// A damaged backup is refused before anything is written.
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	damaged := filepath.Join(t.TempDir(), "damaged.snap")
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(damaged, data, 0o600); err != nil {
		t.Fatal(err)
	}
	badDir := t.TempDir()
	if _, err := RestoreSnapshot(damaged, badDir, testLogger()); !errors.Is(err, mvcc.ErrCorrupt) {
		t.Fatalf("restore of a damaged backup: %v", err)
	}
	if entries, _ := os.ReadDir(badDir); len(entries) != 0 {
		t.Fatalf("failed restore left %d entries", len(entries))
	}

	cfg := testConfig(t)
	got, err := RestoreSnapshot(file, cfg.DataDir, testLogger())
	if err != nil || got != rev {
		t.Fatalf("restore: revision %d, %v; want %d", got, err, rev)
	}
	if _, err := RestoreSnapshot(file, cfg.DataDir, testLogger()); err == nil || !strings.Contains(err.Error(), "already holds a store") {
		t.Fatalf("second restore into the same directory: %v", err)
	}
	r := start(t, cfg)

	// Every readable revision reads the same.
	for at := int64(compactRev); at <= rev; at++ {
		req := &storev1.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: at}
		a, b := m.rng(t, req), r.rng(t, req)
		if a.GetCount() != b.GetCount() || len(a.GetKvs()) != len(b.GetKvs()) {
			t.Fatalf("revision %d: %d keys restored, %d original", at, b.GetCount(), a.GetCount())
		}
		for i := range a.GetKvs() {
			if !proto.Equal(a.GetKvs()[i], b.GetKvs()[i]) {
				t.Fatalf("revision %d: restored %v, original %v", at, b.GetKvs()[i], a.GetKvs()[i])
			}
		}
	}
	cur := r.rng(t, &storev1.RangeRequest{Key: []byte("after-backup")})
	if cur.GetCount() != 0 || cur.GetHeader().GetRevision() != rev || cur.GetHeader().GetCompactRevision() != compactRev {
		t.Fatalf("restored store: %v", cur)
	}
	// The history from the compacted revision is the same.
	n := int(rev - compactRev + 1)
	wa := watchEvents(t, m, &storev1.WatchCreateRequest{Key: []byte{0}, RangeEnd: []byte{0}, StartRevision: compactRev}, n)[:n]
	wb := watchEvents(t, r, &storev1.WatchCreateRequest{Key: []byte{0}, RangeEnd: []byte{0}, StartRevision: compactRev}, n)[:n]
	for i := range wa {
		if !proto.Equal(wa[i], wb[i]) {
			t.Fatalf("event %d: restored %v, original %v", i, wb[i], wa[i])
		}
	}
	// Leases survive, with their keys.
	ttl, err := storev1.NewLeaseServiceClient(r.conn).LeaseTimeToLive(ctx, &storev1.LeaseTimeToLiveRequest{Id: lease.GetId(), Keys: true})
	if err != nil || ttl.GetGrantedTtl().AsDuration() != time.Hour || len(ttl.GetKeys()) != 1 || string(ttl.GetKeys()[0]) != "leased" {
		t.Fatalf("restored lease: %v, %v", ttl, err)
	}
	// The old cluster's members are not carried over.
	ml, err := storev1.NewClusterServiceClient(r.conn).MemberList(ctx, &storev1.MemberListRequest{})
	if err != nil || len(ml.GetMembers()) != 1 || !ml.GetMembers()[0].GetLeader() {
		t.Fatalf("restored members: %v, %v", ml, err)
	}
	// Writes continue from the restored revision, also after a restart.
	if got := r.put(t, "after-restore", "1"); got != rev+1 {
		t.Fatalf("first write after restore at revision %d, want %d", got, rev+1)
	}
	r.stop(t)
	r = start(t, cfg)
	if got := r.put(t, "after-restart", "1"); got != rev+2 {
		t.Fatalf("first write after restart at revision %d, want %d", got, rev+2)
	}
}
