package deploy

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
)

// faults runs the client-go workload (startWorkload: a writer and a
// watcher per namespace and gateway) on the chart's pods on Docker while,
// one at a time, the store leader, a gateway, a watchfanout replica and
// the flow-control instance are killed with SIGKILL and started again as
// a kubelet would, and then the store leader is cut off the network
// (docker network disconnect) for longer than an election and joined
// again. Afterwards the workload's checks (finish) must hold, each gateway
// must see every dependency healthy again, and the store must have a
// leader and its 4 members.
func faults(t *testing.T, network string, cli func(args ...string) (string, error), kubectlAt func(i int, args ...string) (string, error), clients, watchClients []kubernetes.Interface) {
	t.Helper()
	docker := func(args ...string) (string, error) {
		out, err := exec.Command("docker", args...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := docker(args...)
		if err != nil {
			t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return out
	}
	leader := func() string { t.Helper(); return storeLeader(t, cli) }
	// down is how long each fault lasts while the workload runs.
	const down = 4 * time.Second
	kill := func(container string) {
		t.Helper()
		t.Logf("kill -9 %s", container)
		must("kill", "--signal", "KILL", container)
		time.Sleep(down)
		must("start", container)
		time.Sleep(2 * time.Second)
	}

	w := startWorkload(t, clients, watchClients)
	time.Sleep(2 * time.Second)
	old := leader()
	kill(network + "-" + old + "-store")
	if now := leader(); now == old {
		t.Logf("leader %s was elected again after its restart", now)
	}
	kill(network + "-meridian-apigateway-1-apigateway")
	kill(network + "-meridian-watchfanout-0-watchfanout")
	kill(network + "-meridian-flowcontrol-0-flowcontrol")

	// The partition: the leader loses its network, so the others elect a
	// new one; it returns with the same address (the others know it by a
	// name that resolves to it).
	cut := network + "-" + leader() + "-store"
	ip := must("inspect", "-f", "{{(index .NetworkSettings.Networks \""+network+"\").IPAddress}}", cut)
	t.Logf("partition %s (%s) from the network", cut, ip)
	must("network", "disconnect", network, cut)
	time.Sleep(2 * down)
	must("network", "connect", "--ip", ip, network, cut)
	time.Sleep(down)

	w.finish(t, clients)
	for gw := range 2 {
		awaitHealthy(t, func(args ...string) (string, error) { return kubectlAt(gw, args...) })
	}
	leader()
	list, err := cli("member", "list")
	if err != nil || strings.Count(list, "\n") != 4 {
		t.Errorf("store member list after the faults: %v\n%s", err, list)
	}
}

// storeLeader is the store member that `store member list` shows as the
// leader, waiting up to a minute for one.
func storeLeader(t *testing.T, cli func(args ...string) (string, error)) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		list, err := cli("member", "list")
		if leader := listedLeader(list); err == nil && leader != "" {
			return leader
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store has no leader: %v\n%s", err, list)
		}
		time.Sleep(time.Second)
	}
}

// listedLeader returns the leader's id in `store member list` output, or
// "" when it names none.
func listedLeader(list string) string {
	for _, l := range strings.Split(list, "\n")[1:] {
		if f := strings.Fields(l); len(f) == 5 && f[4] == "true" {
			return f[0]
		}
	}
	return ""
}
