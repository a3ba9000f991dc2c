// Package helmtest builds the helm that tests drive: `go install` of
// Version from the module proxy, outside the workspace (helm's module
// graph is its own), once per Builder; later test runs reuse Go's build
// cache. A test is skipped, with the reason, when the proxy cannot be
// reached.
package helmtest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Version is the helm built (docs/deploy.md says which helm the chart
// needs: v3.8+ or v4).
const Version = "helm.sh/helm/v4/cmd/helm@v4.3.1"

// Builder builds helm once; its zero value is ready to use.
type Builder struct {
	once sync.Once
	path string
	skip string
	err  error
}

// Path returns the path of helm, built into dir on the first call; it
// skips t when the module proxy is unreachable and fails it when the
// build fails.
func (b *Builder) Path(t testing.TB, dir string) string {
	t.Helper()
	b.once.Do(func() {
		gobin := filepath.Join(dir, "gobin")
		cmd := exec.Command("go", "install", Version)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOWORK=off", "GOFLAGS=-buildvcs=false")
		out, err := cmd.CombinedOutput()
		switch {
		case err == nil:
			b.path = filepath.Join(gobin, "helm")
		case unreachable(out):
			b.skip = fmt.Sprintf("the Go module proxy is unreachable, so helm (%s) cannot be built: %s", Version, lastLine(out))
		default:
			b.err = fmt.Errorf("go install %s: %w\n%s", Version, err, out)
		}
	})
	if b.skip != "" {
		t.Skip(b.skip)
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// unreachable tells whether go's output says the network or proxy failed.
func unreachable(out []byte) bool {
	for _, s := range []string{"dial tcp", "no such host", "connection refused", "i/o timeout", "GOPROXY", "network is unreachable", "TLS handshake timeout"} {
		if bytes.Contains(out, []byte(s)) {
			return true
		}
	}
	return false
}

func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1]
}
