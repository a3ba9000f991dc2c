package deploy

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// tierCPURequests turns on the per-tier CPU measurement of
// TestImages/chart-on-docker: that many creates, then as many consistent
// GETs (docs/deploy.md, "CPU per request in each tier").
var tierCPURequests = flag.Int("tier-cpu", 0, "TestImages/chart-on-docker: measure each tier's server CPU per create and per consistent GET with this many of each (0: off)")

// tierCPURate limits the measurement's requests per second (client-go's
// rate limiter; 0: as fast as the clients go).
var tierCPURate = flag.Float64("tier-cpu-rate", 0, "TestImages/chart-on-docker -tier-cpu: requests per second (0: unlimited)")

// tierCPUConcurrency is the number of clients sending at once.
const tierCPUConcurrency = 8

// tierContainer is one container whose CPU is measured.
type tierContainer struct {
	tier, container, cgroup string
}

// cpuUsage reads a container's CPU time from its cgroup: cgroup v1's
// cpuacct.usage (ns) or cgroup v2's cpu.stat usage_usec, under Docker's
// cgroupfs or systemd layout.
func cpuUsage(t *testing.T, cgroupFile string) time.Duration {
	t.Helper()
	b, err := os.ReadFile(cgroupFile)
	if err != nil {
		t.Fatalf("read the container's CPU time: %v", err)
	}
	if strings.HasSuffix(cgroupFile, "cpuacct.usage") {
		ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", cgroupFile, err)
		}
		return time.Duration(ns)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "usage_usec" {
			us, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", cgroupFile, err)
			}
			return time.Duration(us) * time.Microsecond
		}
	}
	t.Fatalf("%s has no usage_usec", cgroupFile)
	return 0
}

// cgroupCPUFile finds the file holding a container's CPU time.
func cgroupCPUFile(t *testing.T, container string) string {
	t.Helper()
	id, err := exec.Command("docker", "inspect", "-f", "{{.Id}}", container).Output()
	if err != nil {
		t.Fatalf("docker inspect %s: %v", container, err)
	}
	full := strings.TrimSpace(string(id))
	for _, f := range []string{
		"/sys/fs/cgroup/cpuacct/docker/" + full + "/cpuacct.usage",
		"/sys/fs/cgroup/cpu,cpuacct/docker/" + full + "/cpuacct.usage",
		"/sys/fs/cgroup/system.slice/docker-" + full + ".scope/cpu.stat",
		"/sys/fs/cgroup/docker/" + full + "/cpu.stat",
	} {
		if _, err := os.Stat(f); err == nil {
			return f
		}
	}
	t.Fatalf("no cgroup CPU accounting file found for container %s (cgroup v1 cpuacct or v2 cpu.stat under Docker's layout)", container)
	return ""
}

// measureTierCPU sends n creates, then n consistent GETs of the created
// ConfigMaps, through gateway 0 from the test host, and reports the CPU
// time each tier's container used per request, less what it uses idle
// over the same time (measured just before), and so the requests per
// second one core of that tier serves.
func measureTierCPU(t *testing.T, n int, network, leader string, client kubernetes.Interface) {
	t.Helper()
	var follower string
	for _, m := range []string{"meridian-store-0", "meridian-store-1", "meridian-store-2"} {
		if m != leader {
			follower = m
			break
		}
	}
	tiers := []tierContainer{
		{tier: "gateway (serving)", container: "meridian-apigateway-0-apigateway"},
		{tier: "store leader", container: leader + "-store"},
		{tier: "store follower (voter)", container: follower + "-store"},
		{tier: "store non-voter", container: "meridian-store-nv-0-store"},
		{tier: "watchfanout", container: "meridian-watchfanout-0-watchfanout"},
		{tier: "watchfanout", container: "meridian-watchfanout-1-watchfanout"},
		{tier: "admission", container: "meridian-admission-0-admission"},
		{tier: "flowcontrol", container: "meridian-flowcontrol-0-flowcontrol"},
	}
	for i := range tiers {
		tiers[i].container = network + "-" + tiers[i].container
		tiers[i].cgroup = cgroupCPUFile(t, tiers[i].container)
	}
	sample := func() []time.Duration {
		s := make([]time.Duration, len(tiers))
		for i, c := range tiers {
			s[i] = cpuUsage(t, c.cgroup)
		}
		return s
	}
	ctx := context.Background()
	const ns = "tier-cpu"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", ns, err)
	}
	// run sends n requests with tierCPUConcurrency clients and returns
	// each container's CPU time and the wall time.
	run := func(what string, do func(i int) error) ([]time.Duration, time.Duration) {
		next := make(chan int)
		go func() {
			for i := range n {
				next <- i
			}
			close(next)
		}()
		before, start := sample(), time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		for range tierCPUConcurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					if err := do(i); err != nil {
						mu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		wall := time.Since(start)
		after := sample()
		if firstErr != nil {
			t.Fatalf("%s: %v", what, firstErr)
		}
		for i := range after {
			after[i] -= before[i]
		}
		return after, wall
	}
	idleBefore, idleStart := sample(), time.Now()
	time.Sleep(5 * time.Second)
	idleAfter, idleWall := sample(), time.Since(idleStart)
	data := map[string]string{"k": strings.Repeat("x", 64)}
	creates, createWall := run("create", func(i int) error {
		_, err := client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%05d", i)}, Data: data}, metav1.CreateOptions{})
		return err
	})
	gets, getWall := run("consistent GET", func(i int) error {
		_, err := client.CoreV1().ConfigMaps(ns).Get(ctx, fmt.Sprintf("cm-%05d", i), metav1.GetOptions{})
		return err
	})
	perRequest := func(used []time.Duration, wall time.Duration, i int) time.Duration {
		idle := time.Duration(float64(idleAfter[i]-idleBefore[i]) * float64(wall) / float64(idleWall))
		return max(used[i]-idle, 0) / time.Duration(n)
	}
	// perCore is the requests per second one core of the tier serves;
	// below a microsecond per request the figure is noise.
	perCore := func(d time.Duration) string {
		if d < time.Microsecond {
			return "-"
		}
		return strconv.Itoa(int(time.Second / d))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d creates in %v (%.0f/s), %d consistent GETs in %v (%.0f/s), %d clients (rate limit %v/s), through gateway 0\n",
		n, createWall.Round(time.Millisecond), float64(n)/createWall.Seconds(), n, getWall.Round(time.Millisecond), float64(n)/getWall.Seconds(), tierCPUConcurrency, *tierCPURate)
	fmt.Fprintf(&b, "| tier | container | CPU per create | creates/s per core | CPU per consistent GET | GETs/s per core | idle CPU |\n")
	for i, c := range tiers {
		pc, pg := perRequest(creates, createWall, i), perRequest(gets, getWall, i)
		idle := float64(idleAfter[i]-idleBefore[i]) / float64(idleWall) * 100
		fmt.Fprintf(&b, "| %s | %s | %.0f µs | %s | %.0f µs | %s | %.1f%% |\n", c.tier, strings.TrimPrefix(c.container, network+"-"),
			float64(pc)/1e3, perCore(pc), float64(pg)/1e3, perCore(pg), idle)
	}
	t.Logf("server CPU per request in each tier (cgroup CPU time less the idle rate):\n%s", b.String())
}
