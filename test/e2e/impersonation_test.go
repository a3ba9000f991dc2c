package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// TestKubectlImpersonation drives impersonation with the real kubectl:
// the admin (system:masters) acts as another user with --as and
// --as-group, and `kubectl auth whoami` shows whom; alice, who holds only
// a token, is refused with kube-apiserver's 403, and her refused create
// stores nothing.
func TestKubectlImpersonation(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	alice := cp.tokenKubeconfig("e2e-token-alice")

	// alice may not impersonate anyone. (The requests are --raw: kubectl's
	// discovery, itself impersonated and refused, would hide the message.)
	cm := manifest(t, "cm.json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"by-alice-as-bob"}}`)
	const refusal = `users "bob" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope`
	for _, args := range [][]string{
		{"--as=bob", "get", "--raw", "/api/v1/namespaces/default/configmaps"},
		{"--as=bob", "--as-group=system:masters", "create", "--raw", "/api/v1/namespaces/default/configmaps", "-f", cm},
	} {
		_, errOut, err := kubectlWith(alice, args...)
		if err == nil || !strings.Contains(errOut, refusal) {
			t.Errorf("alice: kubectl %v: %v\n%s\nwant %s", args, err, errOut, refusal)
		}
	}
	const saRefusal = `serviceaccounts "builder" is forbidden: User "alice" cannot impersonate resource "serviceaccounts" in API group "" in the namespace "default"`
	if _, errOut, err := kubectlWith(alice, "--as=system:serviceaccount:default:builder", "get", "--raw", "/api/v1/namespaces/default/configmaps"); err == nil || !strings.Contains(errOut, saRefusal) {
		t.Errorf("alice impersonating a service account: %v %s\nwant %s", err, errOut, saRefusal)
	}
	if _, errOut, err := cp.kubectlErr("-n", "default", "get", "configmap", "by-alice-as-bob"); err == nil || !strings.Contains(errOut, "NotFound") {
		t.Errorf("alice's refused create stored something: %v %s", err, errOut)
	}

	whoami := func(kubeconfig string, args ...string) authenticationv1.UserInfo {
		t.Helper()
		out, errOut, err := kubectlWith(kubeconfig, append(args, "auth", "whoami", "-o", "json")...)
		if err != nil {
			t.Fatalf("kubectl %v auth whoami: %v\n%s", args, err, errOut)
		}
		var review authenticationv1.SelfSubjectReview
		if err := json.Unmarshal([]byte(out), &review); err != nil {
			t.Fatalf("auth whoami printed %q: %v", out, err)
		}
		return review.Status.UserInfo
	}
	if u := whoami(cp.kubeconfig); u.Username != "admin" || !slices.Contains(u.Groups, "system:masters") {
		t.Errorf("admin's whoami: %+v", u)
	}
	if u := whoami(cp.kubeconfig, "--as=bob", "--as-group=ops", "--as-uid=uid-bob"); u.Username != "bob" || u.UID != "uid-bob" ||
		!slices.Equal(u.Groups, []string{"ops", "system:authenticated"}) {
		t.Errorf("admin --as=bob --as-group=ops: %+v", u)
	}
	if u := whoami(cp.kubeconfig, "--as=system:serviceaccount:default:builder"); u.Username != "system:serviceaccount:default:builder" ||
		!slices.Equal(u.Groups, []string{"system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"}) {
		t.Errorf("admin as a service account: %+v", u)
	}
	if u := whoami(alice); u.Username != "alice" || u.UID != "uid-alice" || !slices.Equal(u.Groups, []string{"dev", "system:authenticated"}) {
		t.Errorf("alice's whoami: %+v", u)
	}

	// The admin's impersonated writes are served, as bob, whom a Role
	// lets create config maps.
	cp.grant("default", "bob-writes", "bob", "create", "configmaps")
	cp.kubectl("--as=bob", "-n", "default", "create", "configmap", "by-bob", "--from-literal=k=v")
	cp.kubectl("-n", "default", "get", "configmap", "by-bob")
}

// TestKubectlQueryParameterTypes: an integer query parameter that is not
// an integer is a 400 on a list, as on a watch and in kube-apiserver.
func TestKubectlQueryParameterTypes(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	for _, path := range []string{
		"/api/v1/namespaces/default/configmaps?timeoutSeconds=abc",
		"/api/v1/namespaces/default/configmaps?limit=abc",
		"/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=abc",
	} {
		_, errOut, err := cp.kubectlErr("get", "--raw", path)
		if err == nil || !strings.Contains(errOut, "Error from server (BadRequest)") || !strings.Contains(errOut, `parsing "abc": invalid syntax`) {
			t.Errorf("kubectl get --raw %s: %v %s, want a BadRequest", path, err, errOut)
		}
	}
	if out := cp.kubectl("get", "--raw", "/api/v1/namespaces/default/configmaps?timeoutSeconds=5&limit=1"); !strings.Contains(out, `"kind":"ConfigMapList"`) {
		t.Errorf("list with timeoutSeconds=5: %s", out)
	}
}

// tokenKubeconfig writes a kubeconfig for the control plane that presents
// only token (no client certificate, which kubectl would prefer).
func (cp *controlPlane) tokenKubeconfig(token string) string {
	cp.t.Helper()
	cfg, err := clientcmd.LoadFromFile(cp.kubeconfig)
	if err != nil {
		cp.t.Fatal(err)
	}
	for name := range cfg.AuthInfos {
		cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	}
	path := filepath.Join(cp.t.TempDir(), "token.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		cp.t.Fatal(err)
	}
	return path
}

// kubectlWith runs kubectl with kubeconfig and returns stdout, stderr and
// the exit error.
func kubectlWith(kubeconfig string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}
