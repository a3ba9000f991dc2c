package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// TestKubectlReads drives the read surface with the real kubectl: output
// formats, chunked lists, explain (OpenAPI v3), health and discovery.
func TestKubectlReads(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	cp.createNamespace("reads")
	for i := 0; i < 12; i++ {
		cp.kubectl("-n", "reads", "create", "configmap", fmt.Sprintf("cm-%02d", i), fmt.Sprintf("--from-literal=i=%d", i))
	}

	// Server-side tables: kubectl's columns for configmaps.
	out := cp.kubectl("-n", "reads", "get", "configmaps")
	if !strings.HasPrefix(out, "NAME") || !strings.Contains(strings.Split(out, "\n")[0], "DATA") || !regexp.MustCompile(`(?m)^cm-11 +1 `).MatchString(out) {
		t.Errorf("kubectl get (table):\n%s", out)
	}
	if out := cp.kubectl("get", "namespaces", "reads", "-o", "wide"); !strings.Contains(out, "Active") {
		t.Errorf("kubectl get -o wide:\n%s", out)
	}
	var list struct {
		Items []struct {
			Metadata struct{ Name string }
		}
	}
	// Twelve, and the namespace's kube-root-ca.crt.
	if err := json.Unmarshal([]byte(cp.kubectl("-n", "reads", "get", "configmaps", "-o", "json", "--chunk-size=5")), &list); err != nil || len(list.Items) != 13 {
		t.Errorf("get -o json --chunk-size=5: %v, %d items", err, len(list.Items))
	}
	if out := cp.kubectl("-n", "reads", "get", "configmap", "cm-03", "-o", "yaml"); !strings.Contains(out, "i: \"3\"") {
		t.Errorf("get -o yaml:\n%s", out)
	}
	// kubectl get -v=6 shows the chunked requests.
	_, errOut, err := cp.kubectlErr("-n", "reads", "get", "configmaps", "--chunk-size=5", "-v=6")
	if err != nil || strings.Count(errOut, "limit=5") != 3 {
		t.Errorf("--chunk-size=5 over 13 objects: want 3 requests with limit=5:\n%s", errOut)
	}

	if out := cp.kubectl("explain", "configmap.data"); !strings.Contains(out, "FIELD: data <map[string]string>") || !strings.Contains(out, "Data contains the configuration data") {
		t.Errorf("kubectl explain configmap.data:\n%s", out)
	}
	if out := cp.kubectl("get", "--raw", "/readyz?verbose"); !strings.Contains(out, "[+]store ok") || !strings.Contains(out, "readyz check passed") {
		t.Errorf("/readyz?verbose:\n%s", out)
	}
	if out := cp.kubectl("get", "--raw", "/livez"); out != "ok" {
		t.Errorf("/livez: %q", out)
	}
	if out := cp.kubectl("get", "--raw", "/api/v1"); !strings.Contains(out, `"name":"configmaps"`) {
		t.Errorf("/api/v1:\n%s", out)
	}
	if out := cp.kubectl("get", "--raw", "/version"); !strings.Contains(out, `"gitVersion"`) {
		t.Errorf("/version:\n%s", out)
	}

	// Field validation as kubectl sees it.
	bad := manifest(t, "bad.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: strict\n  namespace: reads\nbogus: 1\n")
	if _, errOut, err := cp.kubectlErr("create", "-f", bad); err == nil || !strings.Contains(errOut, `strict decoding error: unknown field "bogus"`) {
		t.Errorf("create --validate=strict with an unknown field: %v %s", err, errOut)
	}
	if _, errOut, err := cp.kubectlErr("create", "-f", bad, "--validate=warn"); err != nil || !strings.Contains(errOut, `Warning: unknown field "bogus"`) {
		t.Errorf("create --validate=warn: %v %s", err, errOut)
	}
}
