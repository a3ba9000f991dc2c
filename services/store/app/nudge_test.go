package app

import (
	"context"
	"fmt"
	"testing"
	"time"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/testcerts"
)

// TestFollowersLearnSparseCommitsAtOnce: with raft's CommitTimeout set to a
// minute, a follower would learn that a lone write committed only a
// minute later (hashicorp/raft tells followers of a commit with its next
// message). The leader's nudge (raftnode's nudge.go) tells them at once:
// a watch on each follower sees every write of a slow writer — one write,
// then nothing until both watches saw it — long before that.
func TestFollowersLearnSparseCommitsAtOnce(t *testing.T) {
	certs, err := testcerts.New()
	if err != nil {
		t.Fatal(err)
	}
	cfgs := clusterConfigs(t, certs, 3)
	for i := range cfgs {
		cfgs[i].CommitTimeout = time.Minute
	}
	nodes := startNodes(t, cfgs...)
	leader, followers := awaitLeader(t, nodes)
	lc := dialOne(t, certs, leader)

	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	_, start, err := getVia(ctx, lc, "nudge/", false)
	if err != nil {
		t.Fatal(err)
	}
	// Each follower's watch reports the revisions it saw, from before the
	// first write on.
	seen := make([]chan int64, len(followers))
	for i, f := range followers {
		seen[i] = make(chan int64, 16)
		fc := dialOne(t, certs, f)
		ch := seen[i]
		go func() {
			_ = fc.Watch(ctx, &storev1.WatchCreateRequest{Key: []byte("nudge/"), RangeEnd: []byte("nudge0"), StartRevision: start + 1}, func(r *storev1.WatchResponse) error {
				for _, ev := range r.GetEvents() {
					ch <- ev.GetKv().GetModRevision()
				}
				return nil
			})
		}()
	}
	for i := range 6 {
		resp, err := putVia(ctx, lc, fmt.Sprintf("nudge/%d", i), "v")
		if err != nil {
			t.Fatalf("put %d: %v", i, err)
		}
		rev := resp.GetHeader().GetRevision()
		for j, ch := range seen {
			select {
			case got := <-ch:
				if got != rev {
					t.Fatalf("write %d: follower %s saw revision %d, want %d", i, followers[j].cfg.ID, got, rev)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("write %d (revision %d): follower %s's watch did not see it within 20s (CommitTimeout is a minute)", i, rev, followers[j].cfg.ID)
			}
		}
	}
}
