package deploy

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
)

// TestRollingStoreRestartUnderLoad replaces the store members one at a
// time, as `helm upgrade` to a new image does through the StatefulSets'
// RollingUpdate (highest ordinal first, the non-voter group apart), while
// the client-go workload of the fault test (a writer and a watcher per
// namespace and gateway, two gateways) runs: each member gets SIGTERM,
// exits, starts again from its data directory, and the next one goes
// only once it has applied everything the leader had committed when it
// came back (`store status`). Afterwards every acknowledged write is
// present, every watcher saw every write once in order, and no client saw
// an error it does not retry. Processes in a network namespace (as
// TestMultiRegion's, one region, no delay): needs root, not in -short.
func TestRollingStoreRestartUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of processes and restarts each member under load: not in -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for ip netns")
	}
	if out, err := exec.Command("ip", "netns", "list").CombinedOutput(); err != nil {
		t.Skipf("ip netns is not usable here: %v: %s", err, out)
	}
	members := []simMember{{"s0", 0, true}, {"s1", 0, true}, {"s2", 0, true}, {"s3", 0, false}}
	s := newRegionSim(t, 1, members)
	s.startStore()
	storeLeader(t, s.cli(0))
	var clients, watchClients []kubernetes.Interface
	for i, ports := range [][2]int{{7004, 6443}, {7005, 6445}} {
		server := s.startRegion(0, ports[0], ports[1], false)
		clients = append(clients, s.client(server, 10*time.Second))
		watchClients = append(watchClients, s.client(server, 0))
		awaitReady(t, clients[i])
	}
	w := startWorkload(t, clients, watchClients)
	time.Sleep(2 * time.Second)
	// The StatefulSets' order: the non-voter group, then the voters from
	// the highest ordinal down.
	for _, k := range []int{3, 2, 1, 0} {
		id := members[k].id
		start := time.Now()
		t.Logf("replacing %s (leader before: %s)", id, storeLeader(t, s.cli(0)))
		s.stopMember(k)
		s.startMember(k)
		commit := s.leaderCommit(t)
		s.awaitApplied(t, k, commit)
		t.Logf("%s back and caught up with commit index %d after %s", id, commit, time.Since(start).Round(10*time.Millisecond))
		time.Sleep(time.Second)
	}
	w.finish(t, clients)
	list, err := s.cli(0)("member", "list")
	if err != nil || strings.Count(list, "\n") != len(members) {
		t.Errorf("store member list after the roll: %v\n%s", err, list)
	}
}

// statusField is a field of `store status` output ("... applied 440
// commit 441 ..."), or -1.
func statusField(out, name string) int64 {
	f := strings.Fields(out)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == name {
			if n, err := strconv.ParseInt(f[i+1], 10, 64); err == nil {
				return n
			}
		}
	}
	return -1
}

// leaderCommit is the commit index of the leader of the moment, as the
// leader itself reports it (a member just stopped may still be named
// leader by the others for an election timeout: then it is asked again).
func (s *regionSim) leaderCommit(t *testing.T) int64 {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		leader := storeLeader(t, s.cli(0))
		for k, m := range s.members {
			if m.id != leader {
				continue
			}
			out, err := s.statusOf(k)
			if c := statusField(out, "commit"); err == nil && c > 0 && strings.Contains(out, "state Leader") {
				return c
			}
			if time.Now().After(deadline) {
				t.Fatalf("store status of the leader %s: %v: %s", leader, err, out)
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// awaitApplied waits until member k has applied index.
func (s *regionSim) awaitApplied(t *testing.T, k int, index int64) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		out, err := s.statusOf(k)
		if err == nil && statusField(out, "applied") >= index {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never applied index %d: %v: %s", s.members[k].id, index, err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
