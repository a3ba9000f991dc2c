package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/client"
)

// readmeMarker precedes, in the store's README, each code block that
// TestReadmeCluster runs.
const readmeMarker = "<!-- TestReadmeCluster runs the next block"

// TestReadmeCluster runs the README's commands for a 3-voter cluster on
// one host, then for adding a non-voter, as written: the blocks are read
// from README.md, each port in them is replaced by a free one (the same
// everywhere), the certificates they name are made as the all-in-one
// makes them, and `store` is the binary built from this package. Every
// member must keep running and serve its gRPC API (mutual TLS: the
// operator's certificate) and its metrics on its own ports, `member list`
// must show the three voters (and then the non-voter), and every member
// must stop cleanly on SIGTERM.
func TestReadmeCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the store binary and runs a cluster of processes")
	}
	blocks := readmeBlocks(t, "../../README.md")
	if len(blocks) != 2 {
		t.Fatalf("README.md has %d blocks marked %q, want 2 (the 3-voter cluster, then a non-voter)", len(blocks), readmeMarker)
	}
	work := t.TempDir()
	p := writeTestPKI(t, filepath.Join(work, ".meridian", "pki"))
	sh := &miniShell{t: t, bin: buildStore(t), dir: work, vars: map[string]string{}, ports: map[string]string{}}

	voters := sh.run(blocks[0])
	checkMembers(t, voters, 3, 0)
	nonVoter := sh.run(blocks[1])
	checkMembers(t, nonVoter, 3, 1)

	for _, m := range sh.members {
		listen, metrics := m.flag("listen"), m.flag("metrics-listen")
		c, err := client.Dial([]string{listen}, p.operatorTLS())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		st, err := c.Maintenance().Status(ctx, &storev1.StatusRequest{})
		cancel()
		_ = c.Close()
		if err != nil || st.GetMemberId() != m.flag("id") {
			t.Errorf("status of %s at %s: %v, %v", m.flag("id"), listen, st, err)
		}
		if body := httpGet(t, "http://"+metrics+"/metrics"); !strings.Contains(body, "meridian_store_raft_state ") {
			t.Errorf("metrics of %s at %s lack meridian_store_raft_state", m.flag("id"), metrics)
		}
	}
	for _, m := range sh.members {
		if err := m.stop(); err != nil {
			t.Errorf("%s: %v; its log:\n%s", m.flag("id"), err, m.logTail())
		}
	}
}

// checkMembers checks `store member list` output: the voters s0, s1 and
// s2 (one of them the leader) and nonVoters more members.
func checkMembers(t *testing.T, out string, voters, nonVoters int) {
	t.Helper()
	if err := membersAre(out, voters, nonVoters); err != nil {
		t.Fatalf("member list: %v:\n%s", err, out)
	}
}

// membersAre reports how out, a member table, differs from voters voters
// (s0, s1, ...), one leading, and nonVoters non-voters.
func membersAre(out string, voters, nonVoters int) error {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) == 0 || strings.Join(strings.Fields(lines[0]), " ") != "ID PEER CLIENT VOTER LEADER" {
		return errors.New("no member table")
	}
	var ids []string
	var v, nv, leaders int
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != 5 {
			return fmt.Errorf("row %q: want id, peer, client address, voter, leader", l)
		}
		ids = append(ids, f[0])
		if f[3] == "true" {
			v++
		} else {
			nv++
		}
		if f[4] == "true" {
			leaders++
		}
	}
	for i := range voters {
		if !slices.Contains(ids, fmt.Sprintf("s%d", i)) {
			return fmt.Errorf("no member s%d", i)
		}
	}
	if v != voters || nv != nonVoters || leaders != 1 {
		return fmt.Errorf("%d voters, %d non-voters, %d leaders; want %d, %d, 1", v, nv, leaders, voters, nonVoters)
	}
	return nil
}

// readmeBlocks returns the code blocks of file that follow readmeMarker.
func readmeBlocks(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], readmeMarker) {
			continue
		}
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "```") {
			t.Fatalf("%s:%d: the marker is not followed by a code block", file, i+1)
		}
		var block []string
		for i += 2; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
			block = append(block, lines[i])
		}
		blocks = append(blocks, strings.Join(block, "\n"))
	}
	return blocks
}

// buildStore builds this package's binary as "store" in a temporary
// directory.
func buildStore(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "store")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// miniShell runs README blocks written in the subset of sh they use:
// lines continued by a trailing backslash, # comments, NAME=value
// assignments, $NAME expansion, store commands, a trailing & for a
// command that runs in the background (a member). Anything else (quotes,
// pipes, redirections, other programs) fails the test, so that the README
// cannot use what the test does not run.
type miniShell struct {
	t       *testing.T
	bin     string            // the store binary
	dir     string            // the working directory
	vars    map[string]string // shell variables
	ports   map[string]string // README port → free port
	members []*process
}

var (
	// addrPattern matches the addresses whose ports the test replaces.
	addrPattern = regexp.MustCompile(`127\.0\.0\.1:(\d+)`)
	// assignment matches a NAME=value line.
	assignment = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)=(\S*)$`)
)

// run runs block: members start in the background, and each other
// command is run until it succeeds (members serve clients only once they
// have a leader); the last one until its output is a member table
// membersAre accepts, for the voters and non-voters the block's members
// make up so far. It returns the last command's output.
func (sh *miniShell) run(block string) string {
	t := sh.t
	t.Helper()
	block = addrPattern.ReplaceAllStringFunc(block, func(addr string) string {
		port := addrPattern.FindStringSubmatch(addr)[1]
		if sh.ports[port] == "" {
			sh.ports[port] = freePort(t)
		}
		return "127.0.0.1:" + sh.ports[port]
	})
	var last string
	for _, line := range joinContinued(block) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.ContainsAny(line, "'\"`;|<>()*?~\\{}") {
			t.Fatalf("README command %q uses shell syntax the test does not run", line)
		}
		if m := assignment.FindStringSubmatch(line); m != nil {
			sh.vars[m[1]] = sh.expand(m[2])
			continue
		}
		words := strings.Fields(line)
		background := words[len(words)-1] == "&"
		if background {
			words = words[:len(words)-1]
		}
		if words[0] != "store" {
			t.Fatalf("README command %q: the test runs store commands only", line)
		}
		args := make([]string, len(words)-1)
		for i, w := range words[1:] {
			args[i] = sh.expand(w)
		}
		if background {
			sh.members = append(sh.members, sh.start(args))
			continue
		}
		last = sh.until(args)
	}
	return last
}

// expand replaces $NAME in word; an unset variable fails the test.
func (sh *miniShell) expand(word string) string {
	return os.Expand(word, func(name string) string {
		v, ok := sh.vars[name]
		if !ok {
			sh.t.Fatalf("README uses $%s, which it does not set", name)
		}
		return v
	})
}

// until runs `store args` until it exits 0 and, for `member list`, prints
// a table of the voters and non-voters started so far; it fails the test
// after a minute, or when a member exited.
func (sh *miniShell) until(args []string) string {
	t := sh.t
	t.Helper()
	voters, nonVoters := 0, 0
	for _, m := range sh.members {
		if slices.Contains(m.args, "--non-voter") {
			nonVoters++
		} else {
			voters++
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		cmd := exec.Command(sh.bin, args...)
		cmd.Dir = sh.dir
		out, err := cmd.Output()
		if err == nil && (!slices.Contains(args, "list") || membersAre(string(out), voters, nonVoters) == nil) {
			return string(out)
		}
		for _, m := range sh.members {
			if m.exited() {
				t.Fatalf("member %s exited: %v; its log:\n%s", m.flag("id"), m.wait(), m.logTail())
			}
		}
		if time.Now().After(deadline) {
			var stderr string
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("store %s: after a minute: %v, %s\n%s", strings.Join(args, " "), err, stderr, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// process is a member started in the background.
type process struct {
	args []string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // set when done is closed
}

// start starts `store args` in the background, its output in a log file;
// the test's cleanup kills it if it still runs.
func (sh *miniShell) start(args []string) *process {
	t := sh.t
	t.Helper()
	p := &process{args: args, log: filepath.Join(sh.dir, fmt.Sprintf("member-%d.log", len(sh.members))), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(sh.bin, args...)
	p.cmd.Dir, p.cmd.Stdout, p.cmd.Stderr = sh.dir, f, f
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// flag returns the value of the member's --name flag.
func (p *process) flag(name string) string {
	for i, a := range p.args {
		if a == "--"+name && i+1 < len(p.args) {
			return p.args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the process to exit and returns how it ended.
func (p *process) wait() error {
	<-p.done
	return p.err
}

// stop sends SIGTERM and waits (up to 30s) for a clean exit: an error if
// the member had exited before, or exits with an error.
func (p *process) stop() error {
	if p.exited() {
		return fmt.Errorf("exited before it was stopped: %v", p.err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("stopped with %v", p.err)
		}
		return nil
	case <-time.After(30 * time.Second):
		return errors.New("still running 30s after SIGTERM")
	}
}

// logTail returns the last lines of the member's output.
func (p *process) logTail() string {
	f, err := os.Open(p.log)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > 30 {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// joinContinued joins lines ending in a backslash with the next.
func joinContinued(block string) []string {
	var out []string
	var cur strings.Builder
	for _, l := range strings.Split(block, "\n") {
		if c, ok := strings.CutSuffix(strings.TrimRight(l, " \t"), "\\"); ok {
			cur.WriteString(c + " ")
			continue
		}
		cur.WriteString(l)
		out = append(out, cur.String())
		cur.Reset()
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// httpGet returns the body of a GET of url.
func httpGet(t *testing.T, url string) string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d, %v", url, resp.StatusCode, err)
	}
	return string(body)
}
