package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/internal/helmtest"
)

// helmBuild builds the helm the tests run.
var helmBuild helmtest.Builder

// TestHelmChartWithCRDs: helm installs a chart whose crds/ folder holds a
// CRD and whose templates create an object of it, as a new user's first
// operator chart would; helm waits for nothing but the API, so the CRD
// must be served as soon as it is established.
func TestHelmChartWithCRDs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds helm from the module proxy (minutes): not in -short")
	}
	requireKubectl(t)
	helm := helmBuild.Path(t, t.TempDir())
	cp := start(t, "")
	chart := t.TempDir()
	for name, content := range map[string]string{
		"Chart.yaml":        "apiVersion: v2\nname: widgets\nversion: 0.1.0\n",
		"crds/widgets.yaml": widgetCRD,
		"templates/w.yaml":  "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: {{ .Release.Name }}\nspec:\n  size: M\n  replicas: 2\n",
	} {
		p := filepath.Join(chart, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helm, "install", "demo", chart, "--kubeconfig", cp.kubeconfig, "--namespace", "default", "--wait", "--timeout", "60s")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm install: %v\n%s", err, out)
	}
	if got := cp.kubectl("get", "widgets", "demo", "-o", "jsonpath={.spec.size}/{.spec.replicas}"); got != "M/2" {
		t.Errorf("the chart's widget: %q", got)
	}
	if got := cp.kubectl("get", "crd", "widgets.example.com", "-o", "jsonpath={.status.conditions[?(@.type==\"Established\")].status}"); strings.TrimSpace(got) != "True" {
		t.Errorf("the chart's CRD is not established: %q", got)
	}
}
