package e2e

import (
	"strings"
	"testing"
)

// TestKubectlWritesThatChangeNothing: with the real kubectl, a second
// identical server-side apply, a replace with what `get` printed and an
// empty merge patch leave the object's resourceVersion where it was (they
// write nothing, as against kube-apiserver), and a DELETE of every
// namespace's secrets is refused with kube-apiserver's 405.
func TestKubectlWritesThatChangeNothing(t *testing.T) {
	cp := start(t, "")
	cp.kubectl("create", "namespace", "same")
	cm := manifest(t, "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n  namespace: same\ndata:\n  k: v\n")
	cp.kubectl("apply", "--server-side", "--field-manager", "deployer", "-f", cm)
	rv := cp.getConfigMap("same", "app").ResourceVersion

	cp.kubectl("apply", "--server-side", "--field-manager", "deployer", "-f", cm)
	if got := cp.getConfigMap("same", "app").ResourceVersion; got != rv {
		t.Errorf("a second identical apply moved the resourceVersion %s → %s", rv, got)
	}
	printed := manifest(t, "printed.yaml", cp.kubectl("-n", "same", "get", "configmap", "app", "-o", "yaml"))
	cp.kubectl("replace", "-f", printed)
	if got := cp.getConfigMap("same", "app").ResourceVersion; got != rv {
		t.Errorf("replacing the object with itself moved the resourceVersion %s → %s", rv, got)
	}
	cp.kubectl("-n", "same", "patch", "configmap", "app", "--type", "merge", "-p", "{}")
	if got := cp.getConfigMap("same", "app").ResourceVersion; got != rv {
		t.Errorf("an empty merge patch moved the resourceVersion %s → %s", rv, got)
	}
	cp.kubectl("-n", "same", "patch", "configmap", "app", "--type", "merge", "-p", `{"data":{"k":"w"}}`)
	if got := cp.getConfigMap("same", "app").ResourceVersion; got == rv {
		t.Errorf("a patch that changes data left the resourceVersion at %s", rv)
	}

	cp.kubectl("-n", "same", "create", "secret", "generic", "s", "--from-literal=k=v")
	_, errOut, err := cp.kubectlErr("delete", "--raw", "/api/v1/secrets")
	if err == nil || !strings.Contains(errOut, "MethodNotAllowed") || !strings.Contains(errOut, "the server does not allow this method on the requested resource") {
		t.Errorf("DELETE /api/v1/secrets: err %v\n%s", err, errOut)
	}
	if out := cp.kubectl("-n", "same", "get", "secret", "s", "-o", "name"); strings.TrimSpace(out) != "secret/s" {
		t.Errorf("the secret after the refused DELETE: %q", out)
	}
}
