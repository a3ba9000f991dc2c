package robustness

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/client"
	"github.com/meridian-cp/meridian/services/store/internal/testcerts"
)

// binDir holds the store binary; TestMain removes it.
var binDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// buildStore builds the store binary once per test binary.
var buildStore = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "meridian-store-bin-")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "store")
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goBin, "build", "-o", bin, "github.com/meridian-cp/meridian/services/store/cmd/store").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v: %s", err, out)
	}
	return bin, nil
})

// member is one store process. Its raft listener is on its own loopback IP
// (127.0.0.<10+i>), so the proxies can tell who dials; peers reach it
// through its proxy.
type member struct {
	id      string
	idx     int
	dataDir string
	client  string // gRPC address
	peer    string // raft bind address
	metrics string // --metrics-listen address (/metrics)
	args    []string
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// cluster is store processes behind partitioning proxies. Member i's raft
// listener is on 127.0.0.<10+i> behind proxies[i]; with a linkDelay, the
// members are in regions, and a proxy delays connections from another
// region's members by linkDelay each way.
type cluster struct {
	t         *testing.T
	bin       string
	certs     *testcerts.Set
	members   []*member
	proxies   []*proxy
	tlsDir    string
	linkDelay time.Duration

	mu     sync.Mutex
	region map[string]int // member IP → its region
}

// memberIP is the loopback IP member i listens and dials on.
func memberIP(i int) string { return fmt.Sprintf("127.0.0.%d", 10+i) }

// newMemberProxy starts the proxy in front of member i, of region
// region, whose raft listener is peer.
func (c *cluster) newMemberProxy(i, region int, peer string) *proxy {
	c.t.Helper()
	c.mu.Lock()
	c.region[memberIP(i)] = region
	c.mu.Unlock()
	p, err := newProxy(peer, func(src string) time.Duration {
		c.mu.Lock()
		defer c.mu.Unlock()
		if r, ok := c.region[src]; ok && r != region {
			return c.linkDelay
		}
		return 0
	})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(p.close)
	c.proxies = append(c.proxies, p)
	return p
}

func freePort(t *testing.T, ip string) string {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// newCluster starts n voters, all in one region.
func newCluster(t *testing.T, n int, extra ...string) *cluster {
	t.Helper()
	return newClusterIn(t, make([]int, n), 0, extra...)
}

// newClusterIn starts a voter in each of regions (voter i in regions[i]),
// linkDelay apart each way.
func newClusterIn(t *testing.T, regions []int, linkDelay time.Duration, extra ...string) *cluster {
	t.Helper()
	bin, err := buildStore()
	if err != nil {
		t.Fatal(err)
	}
	certs, err := testcerts.New()
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, bin: bin, certs: certs, tlsDir: t.TempDir(), linkDelay: linkDelay, region: map[string]int{}}
	ca, cert, key, err := certs.WriteFiles(c.tlsDir)
	if err != nil {
		t.Fatal(err)
	}
	var initial []string
	for i, region := range regions {
		m := &member{id: fmt.Sprintf("s%d", i), idx: i, dataDir: t.TempDir(), client: freePort(t, "127.0.0.1"), peer: freePort(t, memberIP(i)),
			metrics: freePort(t, "127.0.0.1")}
		p := c.newMemberProxy(i, region, m.peer)
		c.members = append(c.members, m)
		initial = append(initial, fmt.Sprintf("%s=%s/%s", m.id, p.addr(), m.client))
	}
	logDir := os.Getenv("ROBUSTNESS_LOG_DIR")
	if logDir == "" {
		logDir = t.TempDir()
	}
	for i, m := range c.members {
		m.logPath = filepath.Join(logDir, m.id+".log")
		m.args = append([]string{
			"--id", m.id, "--data-dir", m.dataDir, "--listen", m.client,
			"--peer-listen", m.peer, "--peer-advertise", c.proxies[i].addr(),
			"--initial-cluster", strings.Join(initial, ","),
			"--tls-cert-file", cert, "--tls-key-file", key, "--client-ca-file", ca,
			"--metrics-listen", m.metrics, "--compaction-retention", "-1s", "--log-level", "warn",
			"--heartbeat-timeout", "500ms", "--election-timeout", "500ms",
		}, extra...)
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			m.kill()
		}
	})
	for _, m := range c.members {
		c.start(m)
	}
	c.waitHealthy(60 * time.Second)
	return c
}

func (c *cluster) start(m *member) {
	c.t.Helper()
	f, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(c.bin, m.args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		c.t.Fatalf("start %s: %v", m.id, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	m.mu.Lock()
	m.cmd, m.done = cmd, done
	m.mu.Unlock()
}

// kill sends SIGKILL and waits for the process to exit.
func (m *member) kill() {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.cmd = nil
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

func (c *cluster) endpoints() []string {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.client)
	}
	return eps
}

func (c *cluster) dial(eps ...string) *client.Client {
	c.t.Helper()
	if len(eps) == 0 {
		eps = c.endpoints()
	}
	cl, err := client.Dial(eps, c.certs.Client())
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// status asks one member for its status.
func (c *cluster) status(m *member) (*storev1.StatusResponse, error) {
	cl, err := client.Dial([]string{m.client}, c.certs.Client(), client.Options{MaxAttempts: 1})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return cl.Maintenance().Status(ctx, &storev1.StatusRequest{})
}

// leader returns the member that says it leads, or nil.
func (c *cluster) leader() *member {
	for _, m := range c.members {
		if st, err := c.status(m); err == nil && st.GetRaftState() == "Leader" {
			return m
		}
	}
	return nil
}

// waitHealthy waits until every member answers and agrees on a leader.
func (c *cluster) waitHealthy(timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		leaders := map[string]bool{}
		ok := true
		for _, m := range c.members {
			st, err := c.status(m)
			if err != nil || st.GetLeaderId() == "" {
				ok = false
				break
			}
			leaders[st.GetLeaderId()] = true
		}
		if ok && len(leaders) == 1 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("cluster not healthy after %v", timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// partition isolates member i's raft traffic: its proxy refuses every
// connection, and the other proxies refuse connections it dials.
func (c *cluster) partition(i int) {
	ip := memberIP(i)
	for j, p := range c.proxies {
		if j == i {
			p.setDown(true)
		} else {
			p.block(ip, true)
		}
	}
}

// heal removes every partition.
func (c *cluster) heal() {
	for _, p := range c.proxies {
		p.setDown(false)
		p.unblockAll()
	}
}

// metricSum is the sum over the members of the counter or gauge name
// (without labels) on their /metrics, since each one's last start.
func (c *cluster) metricSum(t *testing.T, name string) float64 {
	t.Helper()
	var sum float64
	for _, m := range c.members {
		resp, err := http.Get("http://" + m.metrics + "/metrics")
		if err != nil {
			t.Fatalf("%s: %v", m.id, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%s: %v", m.id, err)
		}
		for _, line := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					t.Fatalf("%s: %s: %v", m.id, line, err)
				}
				sum += f
			}
		}
	}
	return sum
}
