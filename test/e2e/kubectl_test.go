package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestKubectlRoundTrip is the README's walk-through with the real kubectl:
// create a namespace and a configmap, read it back, watch it change and go
// away, lose a race with a stale resourceVersion, get turned away without
// credentials, and find everything again after a restart.
func TestKubectlRoundTrip(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")

	// Discovery.
	res := cp.kubectl("api-resources", "--no-headers")
	for _, want := range []string{"configmaps", "namespaces", "secrets"} {
		if !strings.Contains(res, want) {
			t.Errorf("kubectl api-resources does not list %s:\n%s", want, res)
		}
	}

	cp.createNamespace("demo")
	cp.kubectl("-n", "demo", "create", "configmap", "app", "--from-literal=k=v")
	y := cp.kubectl("-n", "demo", "get", "configmap", "app", "-o", "yaml")
	for _, want := range []string{"k: v", "name: app", "namespace: demo", "resourceVersion:", "uid:", "creationTimestamp:"} {
		if !strings.Contains(y, want) {
			t.Errorf("get -o yaml lacks %q:\n%s", want, y)
		}
	}

	// A watch sees the update and the delete that follow.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	events := cp.kubectlWatch(ctx, "-n", "demo", "get", "configmaps", "--watch")
	expect := func(want string) {
		t.Helper()
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("watch ended before %q", want)
			}
			if got := ev.Type + " " + ev.Object.Metadata.Name + " " + ev.Object.Data["k"]; got != want {
				t.Fatalf("watch event %q, want %q", got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no watch event %q within 30s", want)
		}
	}
	// The initial list: app, and the namespace's kube-root-ca.crt.
	expect("ADDED app v")
	expect("ADDED kube-root-ca.crt ")

	// Update through PUT (kubectl replace) with the current object.
	cur := cp.kubectl("-n", "demo", "get", "configmap", "app", "-o", "json")
	stale := manifest(t, "stale.json", strings.Replace(cur, `"k": "v"`, `"k": "stale"`, 1))
	updated := manifest(t, "updated.json", strings.Replace(cur, `"k": "v"`, `"k": "v2"`, 1))
	cp.kubectl("replace", "-f", updated)
	expect("MODIFIED app v2")

	// The same resourceVersion again is now stale: 409 Conflict.
	_, errOut, err := cp.kubectlErr("replace", "-f", stale)
	if err == nil || !strings.Contains(errOut, "the object has been modified") {
		t.Errorf("replace with a stale resourceVersion: err=%v stderr=%s", err, errOut)
	}
	if got := cp.kubectl("-n", "demo", "get", "configmap", "app", "-o", "jsonpath={.data.k}"); got != "v2" {
		t.Errorf("after the rejected update the value is %q, want v2", got)
	}

	cp.kubectl("-n", "demo", "delete", "configmap", "app")
	expect("DELETED app v2")
	if _, errOut, err := cp.kubectlErr("-n", "demo", "get", "configmap", "app"); err == nil || !strings.Contains(errOut, "NotFound") {
		t.Errorf("get after delete: err=%v stderr=%s", err, errOut)
	}

	// No credentials: system:anonymous, whom RBAC refuses (403 with
	// kube-apiserver's Status), as with --anonymous-auth=true.
	resp, err := cp.anonymousHTTP().Get(cp.url("/api/v1/namespaces"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var st metav1.Status
	if resp.StatusCode != http.StatusForbidden || json.Unmarshal(body, &st) != nil || st.Reason != metav1.StatusReasonForbidden || st.Kind != "Status" ||
		st.Message != `namespaces is forbidden: User "system:anonymous" cannot list resource "namespaces" in API group "" at the cluster scope` {
		t.Errorf("anonymous list: %d %s", resp.StatusCode, body)
	}
	caFile := filepath.Join(cp.dataDir, "pki", "api-ca.crt")
	// A known bearer token works (alice may read namespace demo: a Role in
	// demo granting "get namespaces" is about demo itself); an unknown one
	// is 401.
	cp.grant("demo", "alice-reads", "alice", "get", "namespaces")
	if out, err := exec.Command("kubectl", "--server", cp.url(""), "--certificate-authority", caFile, "--token", "e2e-token-alice", "get", "namespaces", "demo", "-o", "name").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "namespace/demo" {
		t.Errorf("kubectl with a token: %v %s", err, out)
	}
	if out, err := exec.Command("kubectl", "--server", cp.url(""), "--certificate-authority", caFile, "--token", "wrong", "get", "namespaces").CombinedOutput(); err == nil || !strings.Contains(string(out), "Unauthorized") {
		t.Errorf("kubectl with an unknown token: %v %s", err, out)
	}

	// Objects survive a restart.
	cp.kubectl("-n", "demo", "create", "configmap", "keep", "--from-literal=a=b")
	cp.kubectl("-n", "demo", "create", "secret", "generic", "pw", "--from-literal=password=hunter2")
	rvBefore := cp.kubectl("-n", "demo", "get", "configmap", "keep", "-o", "jsonpath={.metadata.resourceVersion}")
	cp.stop()
	cp2 := start(t, cp.dataDir)
	if got := cp2.kubectl("-n", "demo", "get", "configmap", "keep", "-o", "jsonpath={.data.a}/{.metadata.resourceVersion}"); got != "b/"+rvBefore {
		t.Errorf("after restart: %q, want %q", got, "b/"+rvBefore)
	}
	if got := cp2.kubectl("-n", "demo", "get", "secret", "pw", "-o", "jsonpath={.data.password}"); got != "aHVudGVyMg==" {
		t.Errorf("secret after restart: %q", got)
	}
	cp2.kubectl("-n", "demo", "create", "configmap", "after", "--from-literal=x=y")
	rvAfter := cp2.kubectl("-n", "demo", "get", "configmap", "after", "-o", "jsonpath={.metadata.resourceVersion}")
	if before, after := mustInt(t, rvBefore), mustInt(t, rvAfter); after <= before {
		t.Errorf("resourceVersion went backwards across a restart: %s then %s", rvBefore, rvAfter)
	}
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("not a resourceVersion: %q", s)
	}
	return n
}
