package deploy

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

// topologyKeep turns TestImages/chart-on-docker into the standing local
// topology of hack/topology.sh: the chart's pods are started on Docker,
// checked healthy, and left running (no fault test, no cleanup), with
// their volumes and an admin kubeconfig under this directory.
var topologyKeep = flag.String("topology-keep", "", "TestImages/chart-on-docker: leave the topology running, its volumes and kubeconfigs in this directory (hack/topology.sh up)")

// topologyLabel marks every container and network of a topology, so that
// hack/topology.sh down finds them; its value is the network's name.
const topologyLabel = "io.meridian.topology"

// scratchDir is a new directory for a test's files: under
// -topology-keep's directory when the topology stays (the containers use
// it after the test ends), else removed with the test.
func scratchDir(t *testing.T, name string) string {
	t.Helper()
	if *topologyKeep == "" {
		return t.TempDir()
	}
	root := filepath.Join(*topologyKeep, "volumes")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err := os.MkdirTemp(root, name+"-")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// keepTopology writes, for each gateway's published address, a
// kubeconfig (gateway-N.kubeconfig, and admin.kubeconfig for the first)
// into -topology-keep's directory and prints where they are.
func keepTopology(t *testing.T, kubeconfig string, servers []string) {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for i, server := range servers {
		c := cfg.DeepCopy()
		for _, cluster := range c.Clusters {
			cluster.Server = server
		}
		names := []string{filepath.Join(*topologyKeep, "gateway-"+string(rune('1'+i))+".kubeconfig")}
		if i == 0 {
			names = append(names, filepath.Join(*topologyKeep, "admin.kubeconfig"))
		}
		for _, n := range names {
			if err := clientcmd.WriteToFile(*c, n); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("topology running; kubectl --kubeconfig %s get ns", filepath.Join(*topologyKeep, "admin.kubeconfig"))
}
