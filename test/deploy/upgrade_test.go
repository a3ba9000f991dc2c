package deploy

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// upgradeRollFlag makes TestImages build the images a second time under
// another tag and run upgradeRoll instead of the fault test.
var upgradeRollFlag = flag.Bool("upgrade-roll", false, "TestImages/chart-on-docker: build the images again under a second tag and, instead of the fault test, `helm upgrade` the chart's pods to it and roll back, under the workload")

// upgradeRoll is `helm upgrade --set image.tag=<to>` and then a rollback
// to <from> on the chart's pods, while the client-go workload of the fault
// test runs. Each time the chart is rendered again with the tag (its
// Secrets are kept, as the chart's lookup keeps them on a cluster) and
// the workloads' controllers are played, all at the same time as a
// cluster's controllers run: each StatefulSet replaces its pods one at a
// time, highest ordinal first, starting the next only once the replaced
// pod's readinessProbe passes (a store member's /readyz passes once it
// has caught up with the leader's commit index), and each Deployment its
// pods one at a time likewise. Afterwards every container runs the new image,
// every acknowledged write is present, every watcher saw every write once
// in order, no client saw an error it does not retry, and the store has a
// leader and its 4 members.
func upgradeRoll(t *testing.T, run *podRunner, pods []*pod, from, to string, cli func(args ...string) (string, error), clients, watchClients []kubernetes.Interface) {
	t.Helper()
	w := startWorkload(t, clients, watchClients)
	time.Sleep(2 * time.Second)
	for _, step := range []struct{ what, version string }{{"upgrade", to}, {"rollback", from}} {
		began := time.Now()
		_, _, next := chartPods(renderTopology(t, step.version))
		byName := map[string]*pod{}
		for _, p := range pods {
			byName[p.name] = p
		}
		for _, p := range next {
			old := byName[p.name]
			if old == nil {
				t.Fatalf("%s: the chart renders pod %s, which the release did not have", step.what, p.name)
			}
			p.ip = old.ip
		}
		rollConcurrently(t, run, byName, next, cli)
		pods = next
		for _, p := range pods {
			for _, c := range p.spec.Containers {
				image, err := exec.Command("docker", "inspect", "-f", "{{.Config.Image}}", run.containerName(p, c)).Output()
				if got := strings.TrimSpace(string(image)); err != nil || !strings.HasSuffix(got, ":"+step.version) {
					t.Errorf("%s: pod %s container %s runs %q (%v), want tag %s", step.what, p.name, c.Name, got, err, step.version)
				}
			}
		}
		t.Logf("%s to %s: %d pods replaced in %s", step.what, step.version, len(pods), time.Since(began).Round(100*time.Millisecond))
	}
	w.finish(t, clients)
	storeLeader(t, cli)
	list, err := cli("member", "list")
	if err != nil || strings.Count(list, "\n") != 4 {
		t.Errorf("store member list after the upgrade and rollback: %v\n%s", err, list)
	}
}

// controllers groups pods by the workload that owns them, each group in
// the order its controller replaces them: a StatefulSet's RollingUpdate
// highest ordinal first, a Deployment's pods in order.
func controllers(pods []*pod) [][]*pod {
	var owners []string
	groups := map[string][]*pod{}
	for _, p := range pods {
		if _, ok := groups[p.owner]; !ok {
			owners = append(owners, p.owner)
		}
		if p.deployment {
			groups[p.owner] = append(groups[p.owner], p)
		} else {
			groups[p.owner] = append([]*pod{p}, groups[p.owner]...)
		}
	}
	var out [][]*pod
	for _, o := range owners {
		out = append(out, groups[o])
	}
	return out
}

// rollConcurrently replaces the pods of every workload (controllers) at
// the same time, each workload's one at a time, each next pod once the
// one before is ready (replacePod), old pods taken from byName. The store's
// voters and non-voters roll together, as their two StatefulSets do on a
// cluster: at most one voter is down at a time, so the voters keep their
// quorum. It fails the test once every controller has stopped if one
// failed.
func rollConcurrently(t *testing.T, run *podRunner, byName map[string]*pod, next []*pod, cli func(args ...string) (string, error)) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(next))
	for _, group := range controllers(next) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, p := range group {
				if err := replacePod(t, run, byName[p.name], p, cli); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
}

// replacePod stops old's containers (SIGTERM, then SIGKILL after its
// terminationGracePeriodSeconds), removes them, starts p in its place
// (same name, address and volumes) and waits until every readinessProbe
// of p passes, as the controllers wait before the next pod. A
// StatefulSet's pod (a store member above all: not ready until it has a
// leader and has caught up) must be seen not ready at least once first;
// its store lag when found ready is logged ("?" for other services).
// It runs in a controller's goroutine (rollConcurrently): it returns what
// went wrong rather than ending the test.
func replacePod(t *testing.T, run *podRunner, old, p *pod, cli func(args ...string) (string, error)) error {
	grace := int64(30)
	if g := old.spec.TerminationGracePeriodSeconds; g != nil {
		grace = *g
	}
	began := time.Now()
	for _, c := range old.spec.Containers {
		name := run.containerName(old, c)
		if out, err := exec.Command("docker", "stop", "-t", strconv.FormatInt(grace, 10), name).CombinedOutput(); err != nil {
			return fmt.Errorf("docker stop %s: %w: %s", name, err, out)
		}
		if out, err := exec.Command("docker", "rm", name).CombinedOutput(); err != nil {
			return fmt.Errorf("docker rm %s: %w: %s", name, err, out)
		}
	}
	if err := run.startPod(p); err != nil {
		return err
	}
	failed := 0
	deadline := time.Now().Add(3 * time.Minute)
	for {
		err := probeReady(p)
		if err == nil {
			break
		}
		failed++
		if time.Now().After(deadline) {
			return fmt.Errorf("pod %s never became ready after its replacement: %w", p.name, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	took := time.Since(began).Round(10 * time.Millisecond)
	if p.deployment {
		t.Logf("%s replaced and ready after %s (%d failed probes)", p.name, took, failed)
		return nil
	}
	if failed == 0 {
		return fmt.Errorf("store pod %s was ready at its first probe: readiness did not wait for a leader and catch-up", p.name)
	}
	lag, _ := metricValue(p, "meridian_store_ready_lag_entries")
	list, _ := cli("member", "list")
	leader := listedLeader(list)
	t.Logf("%s replaced and ready after %s (%d failed probes; %s entries behind the leader at its last readiness check; leader now %s)",
		p.name, took, failed, lag, leader)
	return nil
}

// probeReady runs every readinessProbe (httpGet) of p's containers from
// the host, against the pod's address, as a kubelet does: a status from
// 200 to 399 passes; HTTPS is not verified.
func probeReady(p *pod) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer client.CloseIdleConnections()
	for _, c := range p.spec.Containers {
		pr := c.ReadinessProbe
		if pr == nil || pr.HTTPGet == nil {
			continue
		}
		port, err := containerPort(c, pr.HTTPGet.Port.String())
		if err != nil {
			return err
		}
		scheme := strings.ToLower(string(pr.HTTPGet.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		resp, err := client.Get(fmt.Sprintf("%s://%s:%d%s", scheme, p.ip, port, pr.HTTPGet.Path))
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode > 399 {
			return fmt.Errorf("%s %s: %s", c.Name, pr.HTTPGet.Path, resp.Status)
		}
	}
	return nil
}

// containerPort resolves a probe's port, a number or a container port's
// name.
func containerPort(c corev1.Container, port string) (int, error) {
	if n, err := strconv.Atoi(port); err == nil {
		return n, nil
	}
	for _, cp := range c.Ports {
		if cp.Name == port {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("container %s has no port %q", c.Name, port)
}

// metricValue reads a gauge from the /metrics of p's first container with
// a port named metrics.
func metricValue(p *pod, name string) (string, error) {
	for _, c := range p.spec.Containers {
		port, err := containerPort(c, "metrics")
		if err != nil {
			continue
		}
		resp, err := http.Get(fmt.Sprintf("http://%s:%d/metrics", p.ip, port))
		if err != nil {
			return "?", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return "?", err
		}
		for _, l := range strings.Split(string(body), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == name {
				return f[1], nil
			}
		}
		return "?", fmt.Errorf("no %s in %s's metrics", name, p.name)
	}
	return "?", fmt.Errorf("pod %s has no metrics port", p.name)
}
