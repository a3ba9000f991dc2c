// Package distributed runs docs/distributed.md: the five services as
// separate processes, started as the page says, and kubectl through each
// gateway; and checks the binaries' default addresses against lib/ports.
package distributed

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/docshell"
	"github.com/meridian-cp/meridian/lib/polltest"
)

const (
	// doc is the page the tests run, from this package's directory.
	doc = "../../docs/distributed.md"
	// runMarker precedes each block TestDistributedDoc runs.
	runMarker = "<!-- TestDistributedDoc runs the next block"
	// buildMarker precedes the block that builds the binaries.
	buildMarker = "<!-- TestDistributedDoc builds the binaries with the next block"
	// pathLine is the build block's last line: the test runs the binaries
	// it built by their paths instead.
	pathLine = "export PATH=$PWD/bin:$PATH"
)

// build is the binaries the tests share: built by the first test that
// needs them, into a directory TestMain removes.
var build struct {
	once sync.Once
	dir  string
	ok   bool
}

func TestMain(m *testing.M) {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

// binaries returns the directory of the binaries the page's build block
// builds, building them on first use (the block's `go build -o bin/
// <packages>`, run from the repository root, with a temporary directory
// in place of bin/). It skips the test under -short.
func binaries(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the six binaries of docs/distributed.md (and runs them); run without -short")
	}
	build.once.Do(func() {
		blocks := docshell.Blocks(t, doc, buildMarker)
		if len(blocks) != 1 {
			t.Fatalf("%s has %d blocks marked %q, want 1", doc, len(blocks), buildMarker)
		}
		lines := strings.Split(strings.TrimSpace(strings.ReplaceAll(blocks[0], "\\\n", " ")), "\n")
		words := strings.Fields(lines[0])
		if len(lines) != 2 || strings.TrimSpace(lines[1]) != pathLine || len(words) < 5 || strings.Join(words[:4], " ") != "go build -o bin/" {
			t.Fatalf("the build block is not `go build -o bin/ <packages>` then `%s`:\n%s", pathLine, blocks[0])
		}
		dir, err := os.MkdirTemp("", "meridian-distributed-bin-")
		if err != nil {
			t.Fatal(err)
		}
		build.dir = dir
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-o", dir + "/"}, words[4:]...)...)
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", strings.Join(words[4:], " "), err, out)
		}
		build.ok = true
	})
	if !build.ok {
		t.Fatal("building the binaries failed (in the first test that needed them)")
	}
	return build.dir
}

// TestDistributedDoc runs the blocks of docs/distributed.md as written,
// with free ports in place of the page's, each command a process in a
// temporary directory: certificates, three store voters, two watchfanout
// replicas, admission, flow control, two gateways, a kubeconfig for each,
// and kubectl through both. Beyond each command succeeding: `member list`
// shows three voters and one leader, `/readyz` prints ok, a `get` returns
// the object, both watches see both ConfigMaps (each written through one
// gateway), every service serves /metrics on its --metrics-listen, a
// create's trace, exported over OTLP by each process, crosses the
// gateway, a store member (proposal, raft log append, apply) and a
// watchfanout replica with the right parents (crossProcessCreate), and
// every process keeps running until SIGTERM and then exits 0.
func TestDistributedDoc(t *testing.T) {
	bin := binaries(t)
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not on PATH")
	}
	blocks := docshell.Blocks(t, doc, runMarker)
	if len(blocks) != 6 {
		t.Fatalf("%s has %d blocks marked %q, want 6 (certificates, store, services, gateways, kubeconfigs, kubectl)", doc, len(blocks), runMarker)
	}
	blocks = docshell.FreePorts(t, blocks)
	work := t.TempDir()
	programs := map[string]string{"kubectl": kubectl}
	for _, name := range []string{"meridian", "store", "watchfanout", "admission", "flowcontrol", "apigateway"} {
		programs[name] = filepath.Join(bin, name)
	}
	// HOME: kubectl's discovery cache goes to the test's directory.
	// Every process exports its spans to an OTLP receiver in the test.
	otlp := startOTLPReceiver(t)
	sh := &docshell.Shell{T: t, Dir: work, Programs: programs, Env: append([]string{"HOME=" + work}, otlp.Env()...), Check: checkOutput}

	for _, b := range blocks {
		sh.Run(b)
	}

	var watches, services []*docshell.Process
	for _, p := range sh.Processes() {
		if p.Args[0] == "kubectl" {
			watches = append(watches, p)
		} else {
			services = append(services, p)
		}
	}
	if len(watches) != 2 || len(services) != 9 {
		t.Fatalf("%d watches and %d services started; want 2 and 9 (3 store members, 2 watchfanouts, admission, flowcontrol, 2 gateways)", len(watches), len(services))
	}
	for _, w := range watches {
		polltest.Until(t, 30*time.Second, w.String()+" to print configmap/one and configmap/two", func() bool {
			out := w.Output()
			return strings.Contains(out, "configmap/one\n") && strings.Contains(out, "configmap/two\n")
		})
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := crossProcessCreate(otlp.Spans())
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	for _, p := range services {
		if p.Exited() {
			t.Fatalf("%s exited: %v", p, p.Wait())
		}
		if m := p.Flag("metrics-listen"); m != "" {
			if code := httpStatus(t, "http://"+m+"/metrics"); code != http.StatusOK {
				t.Errorf("%s: /metrics on %s: %d", p, m, code)
			}
		}
	}

	// Stop in the page's order: the watches, the gateways, then the rest,
	// the store last.
	for _, w := range watches {
		w.Stop(10 * time.Second) // kubectl's status after SIGTERM is no concern
	}
	slices.SortStableFunc(services, func(a, b *docshell.Process) int { return stopRank(a) - stopRank(b) })
	for _, p := range services {
		if err := p.Stop(30 * time.Second); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// stopRank orders processes for stopping: gateways, then the services
// that call only the store, then the store.
func stopRank(p *docshell.Process) int {
	switch p.Args[0] {
	case "apigateway":
		return 0
	case "store":
		return 2
	default:
		return 1
	}
}

// checkOutput checks the output of the page's foreground commands that
// say what they print: a member table with three voters and a leader,
// "ok" from /readyz, and the object a `get ... -o yaml` names.
func checkOutput(words []string, out string) error {
	switch {
	case words[0] == "store" && slices.Contains(words, "list"):
		return threeVotersOneLeader(out)
	case words[0] == "kubectl" && slices.Contains(words, "--raw"):
		if strings.TrimSpace(out) != "ok" {
			return fmt.Errorf("printed %q, want ok", out)
		}
	case words[0] == "kubectl" && slices.Contains(words, "get") && slices.Contains(words, "yaml"):
		name := words[slices.Index(words, "get")+2]
		if !strings.Contains(out, "\n  name: "+name+"\n") {
			return fmt.Errorf("printed no object named %s:\n%s", name, out)
		}
	}
	return nil
}

// threeVotersOneLeader reports how out, a `store member list` table,
// differs from three voters, one of them leading.
func threeVotersOneLeader(out string) error {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 0 || strings.Join(strings.Fields(lines[0]), " ") != "ID PEER CLIENT VOTER LEADER" {
		return fmt.Errorf("no member table:\n%s", out)
	}
	voters, leaders := 0, 0
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != 5 {
			return fmt.Errorf("row %q: want id, peer, client address, voter, leader", l)
		}
		if f[3] == "true" {
			voters++
		}
		if f[4] == "true" {
			leaders++
		}
	}
	if voters != 3 || leaders != 1 {
		return fmt.Errorf("%d voters, %d leaders; want 3 and 1:\n%s", voters, leaders, out)
	}
	return nil
}

// httpStatus returns the status code of a GET of url.
func httpStatus(t *testing.T, url string) int {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}
