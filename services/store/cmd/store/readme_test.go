package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/docshell"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/client"
)

// readmeMarker precedes, in the store's README, each code block that
// TestReadmeCluster runs.
const readmeMarker = "<!-- TestReadmeCluster runs the next block"

// TestReadmeCluster runs the README's commands for a 3-voter cluster on
// one host, then for adding a non-voter, as written: the blocks are read
// from README.md, each port in them is replaced by a free one (the same
// everywhere), the certificates they name are made as the all-in-one
// makes them, and `store` is the binary built from this package. Every
// member must keep running and serve its gRPC API (mutual TLS: the
// operator's certificate) and its metrics on its own ports, `member list`
// must show the three voters (and then the non-voter), and every member
// must stop cleanly on SIGTERM.
func TestReadmeCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the store binary and runs a cluster of processes")
	}
	blocks := docshell.Blocks(t, "../../README.md", readmeMarker)
	if len(blocks) != 2 {
		t.Fatalf("README.md has %d blocks marked %q, want 2 (the 3-voter cluster, then a non-voter)", len(blocks), readmeMarker)
	}
	blocks = docshell.FreePorts(t, blocks)
	work := t.TempDir()
	p := writeTestPKI(t, filepath.Join(work, ".meridian", "pki"))
	sh := &docshell.Shell{T: t, Dir: work, Programs: map[string]string{"store": buildStore(t)}}
	// `member list` is run until it shows every member started so far.
	sh.Check = func(words []string, out string) error {
		if !slices.Contains(words, "list") {
			return nil
		}
		voters, nonVoters := 0, 0
		for _, m := range sh.Processes() {
			if slices.Contains(m.Args, "--non-voter") {
				nonVoters++
			} else {
				voters++
			}
		}
		return membersAre(out, voters, nonVoters)
	}

	voters := sh.Run(blocks[0])
	checkMembers(t, voters, 3, 0)
	nonVoter := sh.Run(blocks[1])
	checkMembers(t, nonVoter, 3, 1)

	for _, m := range sh.Processes() {
		listen, metrics := m.Flag("listen"), m.Flag("metrics-listen")
		c, err := client.Dial([]string{listen}, p.operatorTLS())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		st, err := c.Maintenance().Status(ctx, &storev1.StatusRequest{})
		cancel()
		_ = c.Close()
		if err != nil || st.GetMemberId() != m.Flag("id") {
			t.Errorf("status of %s at %s: %v, %v", m.Flag("id"), listen, st, err)
		}
		if body := httpGet(t, "http://"+metrics+"/metrics"); !strings.Contains(body, "meridian_store_raft_state ") {
			t.Errorf("metrics of %s at %s lack meridian_store_raft_state", m.Flag("id"), metrics)
		}
	}
	for _, m := range sh.Processes() {
		if err := m.Stop(30 * time.Second); err != nil {
			t.Errorf("%s: %v", m.Flag("id"), err)
		}
	}
}

// checkMembers checks `store member list` output: the voters s0, s1 and
// s2 (one of them the leader) and nonVoters more members.
func checkMembers(t *testing.T, out string, voters, nonVoters int) {
	t.Helper()
	if err := membersAre(out, voters, nonVoters); err != nil {
		t.Fatalf("member list: %v:\n%s", err, out)
	}
}

// membersAre reports how out, a member table, differs from voters voters
// (s0, s1, ...), one leading, and nonVoters non-voters.
func membersAre(out string, voters, nonVoters int) error {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 0 || strings.Join(strings.Fields(lines[0]), " ") != "ID PEER CLIENT VOTER LEADER" {
		return errors.New("no member table")
	}
	var ids []string
	var v, nv, leaders int
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != 5 {
			return fmt.Errorf("row %q: want id, peer, client address, voter, leader", l)
		}
		ids = append(ids, f[0])
		if f[3] == "true" {
			v++
		} else {
			nv++
		}
		if f[4] == "true" {
			leaders++
		}
	}
	for i := range voters {
		if !slices.Contains(ids, fmt.Sprintf("s%d", i)) {
			return fmt.Errorf("no member s%d", i)
		}
	}
	if v != voters || nv != nonVoters || leaders != 1 {
		return fmt.Errorf("%d voters, %d non-voters, %d leaders; want %d, %d, 1", v, nv, leaders, voters, nonVoters)
	}
	return nil
}

// buildStore builds this package's binary as "store" in a temporary
// directory.
func buildStore(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "store")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// httpGet returns the body of a GET of url.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d, %v", url, resp.StatusCode, err)
	}
	return string(body)
}
