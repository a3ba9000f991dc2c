package docshell_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/docshell"
)

const doc = "# How to\n\n<!-- run -->\n```sh\nmsg=hello\necho $msg \\\n  127.0.0.1:2479 127.0.0.1:9479\n```\n\nnot run:\n```sh\necho no\n```\n\n<!-- run -->\n```sh\nsleep 60 &\necho 127.0.0.1:2479\n```\n"

// TestBlocksFreePortsRun: the marked blocks are read in order, each fixed
// loopback port is replaced by one free port everywhere it appears,
// variables carry over from block to block, and a background command
// keeps running until stopped.
func TestBlocksFreePortsRun(t *testing.T) {
	for _, prog := range []string{"echo", "sleep"} {
		if _, err := exec.LookPath(prog); err != nil {
			t.Skipf("no %s: %v", prog, err)
		}
	}
	file := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(file, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	blocks := docshell.Blocks(t, file, "<!-- run -->")
	if len(blocks) != 2 || !strings.HasPrefix(blocks[0], "msg=hello") || !strings.HasPrefix(blocks[1], "sleep 60") {
		t.Fatalf("blocks %q", blocks)
	}
	blocks = docshell.FreePorts(t, blocks)
	echo, _ := exec.LookPath("echo")
	sleep, _ := exec.LookPath("sleep")
	sh := &docshell.Shell{T: t, Dir: t.TempDir(), Programs: map[string]string{"echo": echo, "sleep": sleep}}

	out := strings.Fields(sh.Run(blocks[0]))
	if len(out) != 3 || out[0] != "hello" || out[1] == "127.0.0.1:2479" || out[2] == "127.0.0.1:9479" || out[1] == out[2] {
		t.Fatalf("first block printed %q: want hello and two free addresses in place of 2479 and 9479", out)
	}
	if got := strings.TrimSpace(sh.Run(blocks[1])); got != out[1] {
		t.Fatalf("second block printed %s; 2479 became %s in the first", got, out[1])
	}
	ps := sh.Processes()
	if len(ps) != 1 || strings.Join(ps[0].Args, " ") != "sleep 60" || ps[0].Exited() {
		t.Fatalf("background processes %v", ps)
	}
	if err := ps[0].Stop(10 * time.Second); err == nil || !strings.Contains(err.Error(), "terminated") {
		t.Fatalf("sleep stopped by SIGTERM: %v", err)
	}
}
