package raftnode

import (
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
	"github.com/meridian-cp/meridian/lib/netdelay"
)

// regionAddrs reserves a member's raft addresses in a simulated region
// whose members listen on ip: the member listens on direct and is
// reached through proxied, a proxy delaying every byte by linkDelay each
// way except on connections from ip (its own region).
func regionAddrs(t *testing.T, ip string, linkDelay time.Duration) (direct, proxied string) {
	t.Helper()
	addrs := daemontest.FreeAddrs(t, 2)
	_, port, err := net.SplitHostPort(addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	direct, proxied = net.JoinHostPort(ip, port), addrs[1]
	netdelay.Start(t, proxied, direct, linkDelay).Near(ip)
	return direct, proxied
}

// TestNearNonVoterLearnsFromItsVoter: five voters spread 2+2+1 over three
// regions 100 ms apart each way, and a non-voter in each region, as the
// chart's example lays them out. A lone write commits once a voter of
// another region holds it, which the leader hears a round trip after it
// wrote it; those voters learn of it half a round trip after, from the
// follower beside the leader (followernotice.go), and relay it to the
// non-voter of their region, which applies it then, while the leader's
// commit index is still below it. Without relays a non-voter learns of a
// commit from the leader, half a round trip after the leader. The voter
// beside the leader relays to nobody (the leader is near it).
func TestNearNonVoterLearnsFromItsVoter(t *testing.T) {
	const linkDelay = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	regionIP := []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}
	config := func(id string, region int) Config {
		direct, proxied := regionAddrs(t, regionIP[region], linkDelay)
		cfg := Config{ID: id, PeerAddress: direct, PeerAdvertise: proxied, CommitTimeout: time.Minute}
		fastTimeouts(&cfg)
		if region > 0 {
			cfg.HeartbeatTimeout, cfg.ElectionTimeout = 5*time.Second, 5*time.Second // a round trip is 200 ms
		}
		return cfg
	}
	// Region a: two voters, bootstrapped together.
	a0, a1 := config("a0", 0), config("a1", 0)
	initial := []Peer{{ID: "a0", Address: a0.PeerAdvertise}, {ID: "a1", Address: a1.PeerAdvertise}}
	var ms []*member
	for _, cfg := range []Config{a0, a1} {
		cfg.Bootstrap, cfg.InitialCluster = true, initial
		ms = append(ms, newMember(t, cfg))
	}
	for _, m := range ms {
		m.ready()
	}
	leader, followers := leaderOf(t, ms)
	near := followers[0]
	byID := map[string]*member{}
	for _, j := range []struct {
		id       string
		region   int
		nonVoter bool
	}{{"b0", 1, false}, {"b1", 1, false}, {"c0", 2, false}, {"na", 0, true}, {"nb", 1, true}, {"nc", 2, true}} {
		cfg := config(j.id, j.region)
		m := newMember(t, cfg)
		if err := leader.node.AddMember(ctx, j.id, cfg.PeerAdvertise, "", j.nonVoter); err != nil {
			t.Fatal(err)
		}
		byID[j.id] = m
	}
	_, joined := leader.put(ctx, "joined", "v")
	for _, m := range byID {
		if err := m.fsm.WaitApplied(ctx, joined); err != nil {
			t.Fatal(err)
		}
	}
	if !leader.node.IsLeader() {
		t.Fatal("leadership moved while the members joined")
	}

	// Each voter's plan: the non-voter of its region, where the leader
	// is far, from the voter of that region with the lowest id; none
	// beside the leader.
	plans := map[string][]string{"b0": {"nb"}, "b1": nil, "c0": {"nc"}, near.cfg.ID: nil}
	for id, want := range plans {
		m := byID[id]
		if m == nil {
			m = near
		}
		deadline := time.Now().Add(time.Minute)
		for {
			var got []string
			p := m.node.relays.plan.Load()
			if p != nil && string(p.leader) == leader.cfg.ID {
				for _, s := range p.to {
					got = append(got, string(s.ID))
				}
				if slices.Equal(got, want) {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s relays to %v (plan %+v), want %v", id, got, p, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	relayed := func() float64 {
		sum := 0.0
		for _, id := range []string{"b0", "b1", "c0"} {
			sum += testutil.ToFloat64(byID[id].node.metrics.relayedNotices)
		}
		return sum
	}
	before := relayed()

	early := map[string]int{}
	for i := range 3 {
		time.Sleep(2 * linkDelay) // a lone write: the previous one's traffic is done
		want := leader.node.raft.LastIndex() + 1
		key := fmt.Sprintf("relay/%d", i)
		done := make(chan uint64, 1)
		go func() {
			_, index := leader.put(ctx, key, "v")
			done <- index
		}()
		for _, id := range []string{"nb", "nc"} {
			for {
				leaderCommit := leader.node.raft.CommitIndex()
				if byID[id].fsm.AppliedIndex() >= want {
					if leaderCommit < want {
						early[id]++
					}
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("write %d (index %d): %s never applied it", i, want, id)
				}
				time.Sleep(time.Millisecond)
			}
		}
		if index := <-done; index != want {
			t.Fatalf("write %d went to index %d, want %d (another entry came between)", i, index, want)
		}
	}
	if early["nb"] == 0 {
		t.Error("the non-voter nb applied none of 3 lone writes before the leader's commit index reached it: it learned of each commit from the leader, not from the voters of its region")
	}
	if got := relayed() - before; got == 0 {
		t.Error("no non-voter accepted a relayed commit notice")
	}
	t.Logf("lone writes of 3 applied by a remote non-voter before the leader knew they were committed: %v", early)
}

// TestRelayTargets: a voter relays to the non-voters of groups where a
// follower learns of commits early, and of those to the ones near it
// while the leader is far, unless a voter near it has a lower id.
func TestRelayTargets(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		conf raft.Configuration
		rtt  map[raft.ServerID]time.Duration
		want []raft.ServerID
	}{
		{"five voters, leader far, one non-voter near", testConf(5, 3), map[raft.ServerID]time.Duration{"v0": 50 * ms, "n0": ms / 2, "n1": 50 * ms, "n2": 100 * ms}, []raft.ServerID{"n0"}},
		{"a voter with a higher id near", testConf(5, 1), map[raft.ServerID]time.Duration{"v0": 50 * ms, "v4": ms, "v1": 50 * ms, "n0": ms}, []raft.ServerID{"n0"}},
		{"a voter with a lower id near: it relays", testConf(5, 1), map[raft.ServerID]time.Duration{"v0": 50 * ms, "v2": ms, "n0": ms}, nil},
		{"five voters, leader near", testConf(5, 2), map[raft.ServerID]time.Duration{"v0": ms, "n0": ms / 4}, nil},
		{"five voters, non-voter not near enough", testConf(5, 1), map[raft.ServerID]time.Duration{"v0": 40 * ms, "n0": 11 * ms}, nil},
		{"five voters, non-voter a quarter", testConf(5, 1), map[raft.ServerID]time.Duration{"v0": 40 * ms, "n0": 10 * ms}, []raft.ServerID{"n0"}},
		{"five voters, leader not measured", testConf(5, 1), map[raft.ServerID]time.Duration{"n0": ms}, nil},
		{"five voters, non-voter not measured", testConf(5, 1), map[raft.ServerID]time.Duration{"v0": 50 * ms}, nil},
		{"four voters", testConf(4, 1), map[raft.ServerID]time.Duration{"v0": 50 * ms, "n0": ms}, []raft.ServerID{"n0"}},
		{"three voters: no follower learns early", testConf(3, 2), map[raft.ServerID]time.Duration{"v0": 50 * ms, "n0": ms}, nil},
		{"seven voters: no follower learns early", testConf(7, 1), map[raft.ServerID]time.Duration{"v0": 50 * ms, "n0": ms}, nil},
	} {
		var got []raft.ServerID
		for _, s := range relayTargets(tc.conf, "v0", "v3", tc.rtt) {
			got = append(got, s.ID)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: relays to %v, want %v", tc.name, got, tc.want)
		}
	}
}
