package app

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/services/store/internal/testcerts"
)

// TestFiveVoters: a 5-voter group takes writes through any member, serves
// linearizable reads everywhere, keeps going with two voters down (3 of 5
// is a quorum), and refuses writes with three down — nothing acknowledged
// without a quorum.
func TestFiveVoters(t *testing.T) {
	if testing.Short() {
		t.Skip("5 members: skipped with -short")
	}
	certs, err := testcerts.New()
	if err != nil {
		t.Fatal(err)
	}
	nodes := startNodes(t, clusterConfigs(t, certs, 5)...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	leader, followers := awaitLeader(t, nodes) // an election may still run on a loaded machine
	if len(followers) != 4 {
		t.Fatalf("want one leader and four followers")
	}
	fc := dialOne(t, certs, followers[0])
	if _, err := putVia(ctx, fc, "k", "v1"); err != nil {
		t.Fatalf("write via a follower: %v", err)
	}
	for _, nd := range nodes {
		if v, _, err := getVia(ctx, dialOne(t, certs, nd), "k", false); err != nil || v != "v1" {
			t.Fatalf("linearizable read on a member: %q %v", v, err)
		}
	}

	// Two followers down: 3 of 5 remain, a quorum.
	followers[2].stop()
	followers[3].stop()
	for i := 0; i < 5; i++ {
		if _, err := putVia(ctx, fc, fmt.Sprintf("q%d", i), "ok"); err != nil {
			t.Fatalf("write with 3 of 5 voters up: %v", err)
		}
	}
	if v, _, err := getVia(ctx, dialOne(t, certs, leader), "q4", false); err != nil || v != "ok" {
		t.Fatalf("read with 3 of 5 voters up: %q %v", v, err)
	}

	// A third voter down: no quorum, so no write may be acknowledged.
	followers[1].stop()
	wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	defer wcancel()
	_, err = putVia(wctx, dialOne(t, certs, leader), "noquorum", "x")
	if err == nil {
		t.Fatal("a write was acknowledged with 2 of 5 voters up")
	}
	t.Logf("write without a quorum: %v", err)
}
