// Package e2e drives a real meridian binary with the real kubectl and
// client-go, as a user would: build once, start the all-in-one in a temp
// data dir on a free loopback port, talk to it, restart it.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meridian-cp/meridian/lib/pki"
	"github.com/meridian-cp/meridian/lib/telemetry/telemetrytest"
)

// binary is the meridian binary built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "meridian-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "meridian")
	build := exec.Command("go", "build", "-o", binary, "../../cmd/meridian")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building meridian:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// tokens is the static token file every test control plane is started
// with: users with no permission but what they are granted (besides the
// bootstrap policy's discovery and self reviews).
const tokens = `e2e-token-alice,alice,uid-alice,"dev"
e2e-token-carol,carol,uid-carol
e2e-token-dave,dave,uid-dave
`

// controlPlane is a running meridian process.
type controlPlane struct {
	t          *testing.T
	dataDir    string
	addr       string
	grpcAddr   string
	kubeconfig string
	cmd        *exec.Cmd
	logs       *telemetrytest.Buffer
	done       chan struct{}
}

// start runs meridian on dataDir (a new temp dir when empty), with extra
// flags, and waits until it is ready.
func start(t *testing.T, dataDir string, extra ...string) *controlPlane {
	t.Helper()
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	tokenFile := filepath.Join(dataDir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}
	// Port 0: meridian binds free ports itself and names them in its
	// ready line (a port reserved here and released could be taken by
	// another test's listener before meridian binds it).
	cp := &controlPlane{t: t, dataDir: dataDir, kubeconfig: filepath.Join(dataDir, "admin.kubeconfig"), logs: &telemetrytest.Buffer{}, done: make(chan struct{})}
	cp.cmd = exec.Command(binary, append([]string{"--data-dir", dataDir, "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0", "--token-auth-file", tokenFile, "--log-level", "info"}, extra...)...)
	cp.cmd.Stdout, cp.cmd.Stderr = cp.logs, cp.logs
	if err := cp.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cp.cmd.Wait(); close(cp.done) }()
	t.Cleanup(func() {
		cp.stop()
		if t.Failed() {
			t.Logf("meridian logs:\n%s", cp.logs.String())
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-cp.done:
			t.Fatalf("meridian exited before it was ready:\n%s", cp.logs.String())
		default:
		}
		if ready := readyLine(cp.logs.String()); ready != "" {
			cp.addr = strings.TrimPrefix(logField(ready, "api"), "https://")
			cp.grpcAddr = logField(ready, "grpc")
			if cp.addr == "" || cp.grpcAddr == "" {
				t.Fatalf("meridian's ready line names no API addresses: %s", ready)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("meridian not ready after 60s:\n%s", cp.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cp.waitNamespaceDefaults("default")
	return cp
}

// createNamespace creates namespace ns with kubectl and waits for what
// kube-controller-manager's controllers put in every namespace (see
// waitNamespaceDefaults), as the Kubernetes e2e framework waits for it.
func (cp *controlPlane) createNamespace(ns string) {
	cp.t.Helper()
	cp.kubectl("create", "namespace", ns)
	cp.waitNamespaceDefaults(ns)
}

// waitNamespaceDefaults waits until namespace ns has its "default"
// ServiceAccount and kube-root-ca.crt ConfigMap, so that a test that
// counts or watches a namespace's objects starts from them (a bound that
// catches a hang).
func (cp *controlPlane) waitNamespaceDefaults(ns string) {
	cp.t.Helper()
	c := cp.client()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, saErr := c.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		_, cmErr := c.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		cancel()
		if saErr == nil && cmErr == nil {
			return
		}
		if time.Now().After(deadline) {
			cp.t.Fatalf("namespace %s has no default ServiceAccount or kube-root-ca.crt after 30s: %v, %v", ns, saErr, cmErr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (cp *controlPlane) stop() {
	if cp.cmd.Process == nil {
		return
	}
	select {
	case <-cp.done:
		return
	default:
	}
	_ = cp.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-cp.done:
	case <-time.After(30 * time.Second):
		_ = cp.cmd.Process.Kill()
		<-cp.done
		cp.t.Errorf("meridian did not stop within 30s of SIGTERM")
	}
	if code := cp.cmd.ProcessState.ExitCode(); code != 0 {
		cp.t.Errorf("meridian exited with %d after SIGTERM", code)
	}
}

// readyLine returns meridian's "meridian is ready" log line, once logged.
func readyLine(logs string) string {
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "meridian is ready") {
			return line
		}
	}
	return ""
}

// logField returns the value of key=value in a text log line.
func logField(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// requireKubectl skips the test when kubectl is not on PATH.
func requireKubectl(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not on PATH")
	}
}

// manifest writes content to a file called name in a new temporary
// directory of t and returns its path, for kubectl -f.
func manifest(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// kubectlEvent is one event kubectl prints with --output-watch-events -o
// json.
type kubectlEvent struct {
	Type   string `json:"type"`
	Object struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Data     map[string]string `json:"data"`
	} `json:"object"`
}

// kubectlWatch runs kubectl against cp with args (a get with --watch or
// --watch-only) and --output-watch-events -o json until ctx is done or the
// test ends, and sends its events on the channel it returns, which is
// closed when kubectl's output ends.
func (cp *controlPlane) kubectlWatch(ctx context.Context, args ...string) <-chan kubectlEvent {
	cp.t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	args = append(append([]string{"--kubeconfig", cp.kubeconfig}, args...), "--output-watch-events", "-o", "json")
	watch := exec.CommandContext(ctx, "kubectl", args...)
	stdout, err := watch.StdoutPipe()
	if err != nil {
		cancel()
		cp.t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		cancel()
		cp.t.Fatal(err)
	}
	cp.t.Cleanup(func() { cancel(); _ = watch.Wait() })
	events := make(chan kubectlEvent, 16)
	go func() {
		defer close(events)
		dec := json.NewDecoder(bufio.NewReader(stdout))
		for {
			var ev kubectlEvent
			if dec.Decode(&ev) != nil {
				return
			}
			events <- ev
		}
	}()
	return events
}

// kubectl runs kubectl against cp and returns stdout; it fails the test on a
// non-zero exit.
func (cp *controlPlane) kubectl(args ...string) string {
	cp.t.Helper()
	out, errOut, err := cp.kubectlErr(args...)
	if err != nil {
		cp.t.Fatalf("kubectl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// kubectlErr runs kubectl and returns stdout, stderr and the exit error.
func (cp *controlPlane) kubectlErr(args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", cp.kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// restConfig is the admin client configuration.
func (cp *controlPlane) restConfig() *rest.Config {
	cp.t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.kubeconfig)
	if err != nil {
		cp.t.Fatal(err)
	}
	return cfg
}

func (cp *controlPlane) client() kubernetes.Interface {
	cp.t.Helper()
	c, err := kubernetes.NewForConfig(cp.restConfig())
	if err != nil {
		cp.t.Fatal(err)
	}
	return c
}

// anonymousHTTP is an HTTPS client that trusts the control plane's CA and
// presents no credentials.
func (cp *controlPlane) anonymousHTTP() *http.Client {
	cp.t.Helper()
	pool, err := pki.LoadPool(filepath.Join(cp.dataDir, "pki", "api-ca.crt"))
	if err != nil {
		cp.t.Fatal(err)
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

func (cp *controlPlane) url(path string) string { return "https://" + cp.addr + path }

// grant gives user the verbs on resources (kubectl's resource[.group]
// names) in namespace with a Role and a RoleBinding named name, created
// by the admin with kubectl, and waits until the user may use the first
// of them (a bound that catches a hang).
func (cp *controlPlane) grant(namespace, name, user, verbs string, resources ...string) {
	cp.t.Helper()
	cp.kubectl("-n", namespace, "create", "role", name, "--verb="+verbs, "--resource="+strings.Join(resources, ","))
	cp.kubectl("-n", namespace, "create", "rolebinding", name, "--role="+name, "--user="+user)
	verb, _, _ := strings.Cut(verbs, ",")
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _, _ := cp.kubectlErr("-n", namespace, "auth", "can-i", verb, resources[0], "--as="+user)
		if strings.TrimSpace(out) == "yes" {
			return
		}
		if time.Now().After(deadline) {
			cp.t.Fatalf("%s's grant %s did not apply in 30s", user, name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
