package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubectlCreateRaw: kubectl create --raw sends its body without a
// Content-Type; the body is read as JSON, as kube-apiserver reads it,
// and the object is created. A patch must still name its type.
func TestKubectlCreateRaw(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl is not on PATH")
	}
	cp := start(t, "")
	body := filepath.Join(t.TempDir(), "cm.json")
	if err := os.WriteFile(body, []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"raw"},"data":{"k":"v"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := cp.kubectlErr("create", "--raw", "/api/v1/namespaces/default/configmaps", "-f", body)
	if err != nil || !strings.Contains(out, `"name":"raw"`) {
		t.Fatalf("kubectl create --raw: %v\n%s\n%s", err, out, errOut)
	}
	if got := cp.kubectl("-n", "default", "get", "configmap", "raw", "-o", "jsonpath={.data.k}"); got != "v" {
		t.Errorf("created object's data.k = %q, want v", got)
	}
}
