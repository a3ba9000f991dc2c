package deploy

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// faults kills (SIGKILL) the store leader, a watchfanout replica, the
// flow-control instance and a gateway of the chart's pods on Docker, one
// at a time,
// each started again as a kubelet would, while ConfigMaps are written
// through both gateways (through the other while one is down); every
// acknowledged write must then be readable
// through both, the store must have a leader and its 4 members, and each
// gateway must see every dependency healthy again. A write that fails
// while a member is down is retried (an AlreadyExists on the retry means
// the first attempt was applied).
func faults(t *testing.T, network string, cli func(args ...string) (string, error), kubectlAt func(i int, args ...string) (string, error)) {
	t.Helper()
	docker := func(args ...string) (string, error) {
		out, err := exec.Command("docker", args...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	leader := func() string {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			list, err := cli("member", "list")
			if err == nil {
				for _, l := range strings.Split(list, "\n")[1:] {
					if f := strings.Fields(l); len(f) == 5 && f[4] == "true" {
						return f[0]
					}
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("the store has no leader: %v\n%s", err, list)
			}
			time.Sleep(time.Second)
		}
	}
	written := 0
	// down is the gateway that is down (-1: none); writes go to the other.
	down := -1
	write := func(n int) {
		t.Helper()
		for range n {
			name := fmt.Sprintf("w-%03d", written)
			gw := written % 2
			if gw == down {
				gw = 1 - gw
			}
			deadline := time.Now().Add(time.Minute)
			for {
				out, err := kubectlAt(gw, "-n", "demo", "create", "configmap", name, "--from-literal=n="+name)
				if err == nil || strings.Contains(out, "AlreadyExists") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("create configmap %s through gateway %d never succeeded: %v\n%s", name, gw, err, out)
				}
				time.Sleep(500 * time.Millisecond)
			}
			written++
		}
	}
	kill := func(container string) {
		t.Helper()
		if out, err := docker("kill", "--signal", "KILL", container); err != nil {
			t.Fatalf("docker kill %s: %v: %s", container, err, out)
		}
		write(5) // while it is down
		if out, err := docker("start", container); err != nil {
			t.Fatalf("docker start %s: %v: %s", container, err, out)
		}
	}

	write(5)
	old := leader()
	kill(network + "-" + old + "-store")
	if now := leader(); now == old {
		t.Logf("leader %s was elected again after its restart", now)
	}
	kill(network + "-meridian-watchfanout-0-watchfanout")
	kill(network + "-meridian-flowcontrol-0-flowcontrol")
	down = 1
	kill(network + "-meridian-apigateway-1-apigateway")
	down = -1
	write(5)

	for gw := range 2 {
		awaitHealthy(t, func(args ...string) (string, error) { return kubectlAt(gw, args...) })
		out, err := kubectlAt(gw, "-n", "demo", "get", "configmaps", "-o", "name")
		if err != nil {
			t.Fatalf("list through gateway %d: %v\n%s", gw, err, out)
		}
		for i := range written {
			if name := fmt.Sprintf("configmap/w-%03d", i); !strings.Contains(out, name+"\n") {
				t.Errorf("gateway %d does not list %s, an acknowledged write", gw, name)
			}
		}
	}
	list, err := cli("member", "list")
	if err != nil || strings.Count(list, "\n") != 4 {
		t.Errorf("store member list after the faults: %v\n%s", err, list)
	}
}
