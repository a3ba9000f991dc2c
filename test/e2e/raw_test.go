package e2e

import (
	"strings"
	"testing"
)

// TestKubectlCreateRaw: kubectl create --raw sends its body without a
// Content-Type; the body is read as JSON, as kube-apiserver reads it,
// and the object is created. A patch must still name its type.
func TestKubectlCreateRaw(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	body := manifest(t, "cm.json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"raw"},"data":{"k":"v"}}`)
	out, errOut, err := cp.kubectlErr("create", "--raw", "/api/v1/namespaces/default/configmaps", "-f", body)
	if err != nil || !strings.Contains(out, `"name":"raw"`) {
		t.Fatalf("kubectl create --raw: %v\n%s\n%s", err, out, errOut)
	}
	if got := cp.kubectl("-n", "default", "get", "configmap", "raw", "-o", "jsonpath={.data.k}"); got != "v" {
		t.Errorf("created object's data.k = %q, want v", got)
	}
}
