// Package deploy tests what deploy/ ships: the Helm chart
// (deploy/helm/meridian) rendered by a real helm, its manifests decoded
// strictly into the Kubernetes API types, every flag it passes checked
// against the binaries' own flag sets; and the container images
// hack/images.sh builds, run with a read-only root (when a Docker engine
// answers).
package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."

// chartDir is the chart under test.
var chartDir = filepath.Join(repoRoot, "deploy", "helm", "meridian")

// helmVersion is the helm built from the module proxy for the tests
// (docs/deploy.md says which helm the chart needs: v3.8+ or v4).
const helmVersion = "helm.sh/helm/v4/cmd/helm@v4.3.1"

// scratch is a directory shared by the package's tests (the helm binary,
// the service binaries), removed when they end.
var scratch string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "meridian-deploy-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	scratch = dir
	// client-go's RetryWatcher logs each failed watch through klog; the
	// fault test counts those errors itself.
	klog.SetLogger(logr.Discard())
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	helmOnce sync.Once
	helmPath string
	helmSkip string
	helmErr  error
)

// helm returns the path of a helm built with `go install` from the module
// proxy (once per test run; later runs reuse Go's build cache). The test
// is skipped when the proxy cannot be reached.
func helm(t *testing.T) string {
	t.Helper()
	helmOnce.Do(func() {
		gobin := filepath.Join(scratch, "gobin")
		cmd := exec.Command("go", "install", helmVersion)
		// Outside the workspace: helm's module graph is its own.
		cmd.Dir = scratch
		cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOWORK=off", "GOFLAGS=-buildvcs=false")
		out, err := cmd.CombinedOutput()
		switch {
		case err == nil:
			helmPath = filepath.Join(gobin, "helm")
		case unreachable(out):
			helmSkip = fmt.Sprintf("the Go module proxy is unreachable, so helm (%s) cannot be built: %s", helmVersion, lastLine(out))
		default:
			helmErr = fmt.Errorf("go install %s: %w\n%s", helmVersion, err, out)
		}
	})
	if helmSkip != "" {
		t.Skip(helmSkip)
	}
	if helmErr != nil {
		t.Fatal(helmErr)
	}
	return helmPath
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

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// binaries are the commands the images hold, by image name, and their
// main packages.
var binaries = map[string]string{
	"store":       "./services/store/cmd/store",
	"watchfanout": "./services/watchfanout/cmd/watchfanout",
	"admission":   "./services/admission/cmd/admission",
	"flowcontrol": "./services/flowcontrol/cmd/flowcontrol",
	"apigateway":  "./services/apigateway/cmd/apigateway",
	"meridian":    "./cmd/meridian",
}

// buildBinaries builds the six binaries once and returns their directory.
func buildBinaries(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir = filepath.Join(scratch, "bin")
		args := []string{"build", "-o", binDir + "/"}
		for _, pkg := range binaries {
			args = append(args, pkg)
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binDir
}
