// Package deploy tests what deploy/ ships: the Helm chart
// (deploy/helm/meridian) rendered by a real helm, its manifests decoded
// strictly into the Kubernetes API types, every flag it passes checked
// against the binaries' own flag sets; and the container images
// hack/images.sh builds, run with a read-only root (when a Docker engine
// answers).
package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/meridian-cp/meridian/internal/helmtest"
	"k8s.io/klog/v2"
)

// repoRoot is the repository's root, from this package's directory.
const repoRoot = "../.."

// chartDir is the chart under test.
var chartDir = filepath.Join(repoRoot, "deploy", "helm", "meridian")

// scratch is a directory shared by the package's tests (the helm binary,
// the service binaries), removed when they end.
var scratch string

func TestMain(m *testing.M) {
	if code, ran := runLinkProbe(); ran {
		os.Exit(code)
	}
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

// helmBuild builds the helm the tests run.
var helmBuild helmtest.Builder

// helm returns the path of a helm built from the module proxy (package
// helmtest); the test is skipped when the proxy cannot be reached.
func helm(t *testing.T) string {
	t.Helper()
	return helmBuild.Path(t, scratch)
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
