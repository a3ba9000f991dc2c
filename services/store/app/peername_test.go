package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/services/store/internal/testcerts"
)

// TestVoterWhoseNameDoesNotResolveYet starts two of three voters whose
// --initial-cluster names the third by a DNS name that does not resolve
// (as a StatefulSet peer's name before its pod exists): both start, elect
// a leader and commit writes, and raft keeps dialling the third by name.
func TestVoterWhoseNameDoesNotResolveYet(t *testing.T) {
	certs, err := testcerts.New()
	if err != nil {
		t.Fatal(err)
	}
	cfgs := clusterConfigs(t, certs, 3)
	_, port, _ := strings.Cut(cfgs[2].PeerAddress, ":")
	unpublished := "meridian-store-2.meridian-store-peers.invalid:" + port
	for i := range cfgs {
		cfgs[i].InitialCluster[2].PeerAddress = unpublished
	}
	if err := cfgs[0].Validate(); err != nil {
		t.Fatalf("Validate refused a peer whose name does not resolve: %v", err)
	}
	nodes := startNodes(t, cfgs[0], cfgs[1])
	leader, _ := awaitLeader(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := dialOne(t, certs, leader)
	if _, err := putVia(ctx, c, "k", "v"); err != nil {
		t.Fatalf("write with two of three voters up: %v", err)
	}
	if v, _, err := getVia(ctx, c, "k", false); err != nil || v != "v" {
		t.Fatalf("linearizable read: %q, %v", v, err)
	}
	ms, err := leader.app.node.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range ms {
		if m.GetId() == "s2" {
			found = m.GetPeerAddress() == unpublished
		}
	}
	if !found {
		t.Errorf("the raft configuration does not keep s2 at %s: %+v", unpublished, ms)
	}
}

// TestPeerAddressChecks: the syntax of a peer address is still checked at
// start, with the problem named.
func TestPeerAddressChecks(t *testing.T) {
	certs, err := testcerts.New()
	if err != nil {
		t.Fatal(err)
	}
	for addr, want := range map[string]string{
		"peer.invalid":       "missing port",
		"peer.invalid:0":     "non-zero port",
		"peer.invalid:http":  "non-zero port",
		":2480":              "no host",
		"0.0.0.0:2480":       "concrete IP",
		"peer.invalid:99999": "non-zero port",
	} {
		cfgs := clusterConfigs(t, certs, 3)
		cfgs[0].InitialCluster[1].PeerAddress = addr
		err := cfgs[0].Validate()
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `"s1"`) {
			t.Errorf("InitialCluster peer %q: %v, want an error about s1 saying %q", addr, err, want)
		}
	}
}
