// Package docshell replays the command blocks of a Markdown document in a
// test, so that a how-to cannot drift from what works: the test reads the
// blocks a marker line points at, runs every command in them as a process,
// and checks what it likes of the result.
//
// Blocks are written in the subset of sh that Shell runs: # comments,
// lines continued by a trailing backslash, NAME=value assignments, $NAME
// expansion, and a trailing & for a command that keeps running in the
// background (a server). Anything else (quotes, pipes, redirections,
// globs, subshells) fails the test, so that a document cannot use what
// the test does not run.
package docshell

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/daemon/daemontest"
)

// Blocks returns the fenced code blocks of the Markdown file that follow
// a line beginning with marker, in order. A marker not followed by a
// fence fails the test.
func Blocks(t testing.TB, file, marker string) []string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], marker) {
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

// loopbackAddr matches the addresses whose ports FreePorts replaces.
var loopbackAddr = regexp.MustCompile(`127\.0\.0\.1:(\d+)`)

// FreePorts returns blocks with the port of every address 127.0.0.1:N
// replaced by a port that was free a moment ago: the same port wherever N
// appears, a different one for each N. Documents name fixed ports (the
// defaults, a port plan); a test cannot rely on those being free.
func FreePorts(t testing.TB, blocks []string) []string {
	t.Helper()
	var ports []string
	seen := map[string]bool{}
	for _, b := range blocks {
		for _, m := range loopbackAddr.FindAllStringSubmatch(b, -1) {
			if !seen[m[1]] {
				seen[m[1]] = true
				ports = append(ports, m[1])
			}
		}
	}
	sort.Strings(ports)
	free := map[string]string{}
	for i, addr := range daemontest.FreeAddrs(t, len(ports)) {
		free[ports[i]] = addr
	}
	out := make([]string, len(blocks))
	for i, b := range blocks {
		out[i] = loopbackAddr.ReplaceAllStringFunc(b, func(addr string) string {
			return free[loopbackAddr.FindStringSubmatch(addr)[1]]
		})
	}
	return out
}

// Shell runs blocks. Set its fields before the first Run.
type Shell struct {
	// T is the test; every failure fails it.
	T testing.TB
	// Dir is the working directory of every command.
	Dir string
	// Programs maps each command name a block may run to the program
	// that runs it; a block running anything else fails the test.
	Programs map[string]string
	// Env is added to the environment of every command.
	Env []string
	// Check, when set, is called with each foreground command's words
	// (after expansion, the command name first) and standard output once
	// it exited 0; an error runs the command again.
	Check func(words []string, stdout string) error
	// Timeout bounds the attempts at one foreground command; zero: a
	// minute.
	Timeout time.Duration

	vars       map[string]string
	background []*Process
}

// forbidden are the characters of sh syntax Shell does not run.
const forbidden = "'\"`;|<>()*?~\\{}[]"

// assignment matches a NAME=value line.
var assignment = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)=(\S*)$`)

// Run runs block. A command with a trailing & starts in the background;
// every other command is run until it exits 0 and Check accepts its
// output (servers take a moment to serve), failing the test after
// Timeout or as soon as a background process has exited. It returns the
// standard output of the last foreground command.
func (sh *Shell) Run(block string) string {
	t := sh.T
	t.Helper()
	if sh.vars == nil {
		sh.vars = map[string]string{}
	}
	var last string
	for _, line := range joinContinued(block) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.ContainsAny(line, forbidden) {
			t.Fatalf("command %q uses shell syntax the test does not run", line)
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
		for i, w := range words {
			words[i] = sh.expand(w)
		}
		if _, ok := sh.Programs[words[0]]; !ok {
			t.Fatalf("command %q: the test runs only %s", line, strings.Join(sortedKeys(sh.Programs), ", "))
		}
		if background {
			sh.background = append(sh.background, sh.start(words))
			continue
		}
		last = sh.until(words)
	}
	return last
}

// Processes returns the background processes started so far, in order.
func (sh *Shell) Processes() []*Process { return sh.background }

// expand replaces $NAME in word; an unset variable fails the test.
func (sh *Shell) expand(word string) string {
	return os.Expand(word, func(name string) string {
		v, ok := sh.vars[name]
		if !ok {
			sh.T.Fatalf("a command uses $%s, which no line sets", name)
		}
		return v
	})
}

// command returns the command that runs words.
func (sh *Shell) command(words []string) *exec.Cmd {
	cmd := exec.Command(sh.Programs[words[0]], words[1:]...)
	cmd.Dir = sh.Dir
	cmd.Env = append(os.Environ(), sh.Env...)
	return cmd
}

// until runs words until they exit 0 with output Check accepts.
func (sh *Shell) until(words []string) string {
	t := sh.T
	t.Helper()
	timeout := sh.Timeout
	if timeout == 0 {
		timeout = time.Minute
	}
	deadline := time.Now().Add(timeout)
	for {
		cmd := sh.command(words)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if err == nil && sh.Check != nil {
			err = sh.Check(words, stdout.String())
		}
		if err == nil {
			return stdout.String()
		}
		for _, p := range sh.background {
			if p.Exited() {
				t.Fatalf("%s exited while `%s` waited for it: %v; its output:\n%s", p, strings.Join(words, " "), p.Wait(), p.LogTail())
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("`%s` after %v: %v\nstdout: %s\nstderr: %s", strings.Join(words, " "), timeout, err, stdout.String(), stderr.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Process is a command started in the background.
type Process struct {
	// Args are its words after expansion, the command name first.
	Args []string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // set before done is closed
}

// start starts words in the background, its output in a log file. When
// the test ends a process still running is killed, and when the test
// failed the end of every process's output is logged.
func (sh *Shell) start(words []string) *Process {
	t := sh.T
	t.Helper()
	p := &Process{Args: words, done: make(chan struct{})}
	f, err := os.CreateTemp(t.TempDir(), words[0]+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	p.log = f.Name()
	p.cmd = sh.command(words)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.Exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s, the end of its output:\n%s", p, p.LogTail())
		}
	})
	return p
}

// String names the process by its command and its first arguments.
func (p *Process) String() string {
	s := strings.Join(p.Args, " ")
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return "`" + s + "`"
}

// Flag returns the value of the process's --name flag; "" when unset.
func (p *Process) Flag(name string) string {
	for i, a := range p.Args {
		if a == "--"+name && i+1 < len(p.Args) {
			return p.Args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits for the process to exit and returns how it ended.
func (p *Process) Wait() error {
	<-p.done
	return p.err
}

// Stop sends SIGTERM and waits up to timeout for the process to exit 0:
// an error if it had exited before, exits otherwise, or does not exit in
// time (it is killed then).
func (p *Process) Stop(timeout time.Duration) error {
	if p.Exited() {
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
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("still running %v after SIGTERM", timeout)
	}
}

// Output returns what the process has written so far, standard output
// and error together.
func (p *Process) Output() string {
	data, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	return string(data)
}

// LogTail returns the last 30 lines of the process's output.
func (p *Process) LogTail() string {
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

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
