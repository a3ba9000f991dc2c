package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestKubectlRBAC drives RBAC with the real kubectl, as a cluster's users
// would: carol, who holds a token and nothing else, is refused (with
// kube-apiserver's 403, word for word) until the admin's Role and
// RoleBinding let her get and list config maps in one namespace; then she
// may there only, and may not create. `kubectl auth can-i` answers for
// her, with --as and --list. dave, who may create RoleBindings, cannot
// bind cluster-admin. A new binding applies within a second.
func TestKubectlRBAC(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	carol := cp.tokenKubeconfig("e2e-token-carol")
	dave := cp.tokenKubeconfig("e2e-token-dave")
	cp.kubectl("create", "namespace", "team")
	cp.kubectl("create", "namespace", "other")
	cp.kubectl("-n", "team", "create", "configmap", "app", "--from-literal=k=v")
	cp.kubectl("-n", "other", "create", "configmap", "app", "--from-literal=k=v")

	// refused runs kubectl and expects it to print message, the server's
	// 403, at the end of its output (after "Error from server
	// (Forbidden): ", or "error: failed to create ...: " for a create).
	refused := func(kubeconfig, message string, args ...string) {
		t.Helper()
		_, errOut, err := kubectlWith(kubeconfig, args...)
		if out := strings.TrimSpace(errOut); err == nil || !strings.HasSuffix(out, ": "+message) {
			t.Errorf("kubectl %v: %v\n%s\nwant %s", args, err, errOut, message)
		}
	}
	refused(carol, `configmaps is forbidden: User "carol" cannot list resource "configmaps" in API group "" in the namespace "team"`,
		"-n", "team", "get", "configmaps")

	// The grant, and how long it takes to apply: carol's list is tried
	// from the moment the RoleBinding is stored.
	cp.kubectl("-n", "team", "create", "role", "cm-reader", "--verb=get,list", "--resource=configmaps")
	cp.kubectl("-n", "team", "create", "rolebinding", "carol-reads", "--role=cm-reader", "--user=carol")
	stored := time.Now()
	client := cp.anonymousHTTP()
	for {
		req, err := http.NewRequest(http.MethodGet, cp.url("/api/v1/namespaces/team/configmaps"), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer e2e-token-carol")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Since(stored) > time.Second {
			t.Fatalf("the RoleBinding did not apply within a second of being stored (last answer %d)", resp.StatusCode)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("the RoleBinding applied %v after it was stored", time.Since(stored).Round(time.Millisecond))

	if out, errOut, err := kubectlWith(carol, "-n", "team", "get", "configmaps", "-o", "name"); err != nil || strings.TrimSpace(out) != "configmap/app\nconfigmap/kube-root-ca.crt" {
		t.Errorf("carol lists team's config maps: %v %s %s", err, out, errOut)
	}
	if out, errOut, err := kubectlWith(carol, "-n", "team", "get", "configmap", "app", "-o", "jsonpath={.data.k}"); err != nil || out != "v" {
		t.Errorf("carol gets team's config map: %v %s %s", err, out, errOut)
	}
	refused(carol, `configmaps "app" is forbidden: User "carol" cannot get resource "configmaps" in API group "" in the namespace "other"`,
		"-n", "other", "get", "configmap", "app")
	refused(carol, `configmaps is forbidden: User "carol" cannot create resource "configmaps" in API group "" in the namespace "team"`,
		"-n", "team", "create", "configmap", "mine", "--from-literal=a=b")
	refused(carol, `secrets is forbidden: User "carol" cannot list resource "secrets" in API group "" in the namespace "team"`,
		"-n", "team", "get", "secrets")
	refused(carol, `namespaces is forbidden: User "carol" cannot list resource "namespaces" in API group "" at the cluster scope`,
		"get", "namespaces")

	// kubectl auth can-i: carol asking for herself, the admin asking as
	// carol, and her rules.
	for _, tc := range []struct {
		kubeconfig string
		args       []string
		want       string
	}{
		{carol, []string{"-n", "team", "auth", "can-i", "list", "configmaps"}, "yes"},
		{carol, []string{"-n", "team", "auth", "can-i", "create", "configmaps"}, "no"},
		{carol, []string{"-n", "other", "auth", "can-i", "get", "configmaps"}, "no"},
		{cp.kubeconfig, []string{"-n", "team", "auth", "can-i", "get", "configmaps/app", "--as=carol"}, "yes"},
		{cp.kubeconfig, []string{"-n", "other", "auth", "can-i", "get", "configmaps", "--as=carol"}, "no"},
		{cp.kubeconfig, []string{"-n", "team", "auth", "can-i", "delete", "namespaces", "--as=carol"}, "no"},
		{cp.kubeconfig, []string{"auth", "can-i", "delete", "namespaces"}, "yes"},
	} {
		out, _, _ := kubectlWith(tc.kubeconfig, tc.args...)
		if strings.TrimSpace(out) != tc.want {
			t.Errorf("kubectl %v: %q, want %q", tc.args, out, tc.want)
		}
	}
	for _, kc := range []struct {
		kubeconfig string
		args       []string
	}{{carol, nil}, {cp.kubeconfig, []string{"--as=carol"}}} {
		out, errOut, err := kubectlWith(kc.kubeconfig, append([]string{"-n", "team", "auth", "can-i", "--list"}, kc.args...)...)
		if err != nil {
			t.Fatalf("kubectl auth can-i --list %v: %v %s", kc.args, err, errOut)
		}
		if !hasRow(out, "configmaps", "[get list]") || !hasRow(out, "selfsubjectaccessreviews.authorization.k8s.io", "[create]") ||
			!hasRow(out, "[/api/*]", "[get]") || hasRow(out, "secrets", "") {
			t.Errorf("kubectl auth can-i --list %v:\n%s", kc.args, out)
		}
	}

	// dave may create RoleBindings in team, and nothing else: he cannot
	// bind cluster-admin, nor a role whose permissions he lacks.
	cp.grant("team", "binder", "dave", "create,get", "rolebindings.rbac.authorization.k8s.io")
	_, errOut, err := kubectlWith(dave, "-n", "team", "create", "rolebinding", "dave-admin", "--clusterrole=cluster-admin", "--user=dave")
	const escalation = `: rolebindings.rbac.authorization.k8s.io "dave-admin" is forbidden: user "dave" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:
{APIGroups:["*"], Resources:["*"], Verbs:["*"]}
{NonResourceURLs:["*"], Verbs:["*"]}`
	if err == nil || !strings.HasSuffix(strings.TrimSpace(errOut), escalation) {
		t.Errorf("dave binds cluster-admin: %v\n%s\nwant\n%s", err, errOut, escalation)
	}
	_, errOut, err = kubectlWith(dave, "-n", "team", "create", "rolebinding", "dave-reads", "--role=cm-reader", "--user=dave")
	if err == nil || !strings.Contains(errOut, `is attempting to grant RBAC permissions not currently held:
{APIGroups:[""], Resources:["configmaps"], Verbs:["get" "list"]}`) {
		t.Errorf("dave binds cm-reader: %v %s", err, errOut)
	}
	refused(dave, `clusterrolebindings.rbac.authorization.k8s.io is forbidden: User "dave" cannot create resource "clusterrolebindings" in API group "rbac.authorization.k8s.io" at the cluster scope`,
		"create", "clusterrolebinding", "dave-admin", "--clusterrole=cluster-admin", "--user=dave")
	if _, errOut, err := cp.kubectlErr("-n", "team", "get", "rolebinding", "dave-admin"); err == nil || !strings.Contains(errOut, "NotFound") {
		t.Errorf("a refused binding was stored: %v %s", err, errOut)
	}
	// What dave holds, he may bind: the admin lets him read config maps.
	cp.grant("team", "dave-cm", "dave", "get,list", "configmaps")
	if _, errOut, err := kubectlWith(dave, "-n", "team", "create", "rolebinding", "dave-reads", "--role=cm-reader", "--user=dave"); err != nil {
		t.Errorf("dave binds a role he holds: %v %s", err, errOut)
	}
}

// TestKubectlDefaultRolesAndImpersonation: the bootstrap roles exist and
// admin, edit and view aggregate the roles labelled for them, a chart's
// role included; a user granted the impersonate verb on one user may act
// as that user, and only that one.
func TestKubectlDefaultRolesAndImpersonation(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	carol := cp.tokenKubeconfig("e2e-token-carol")
	for _, name := range []string{"cluster-admin", "admin", "edit", "view", "system:discovery", "system:basic-user", "system:public-info-viewer", "system:service-account-issuer-discovery"} {
		cp.kubectl("get", "clusterrole", name)
	}
	for _, name := range []string{"cluster-admin", "system:discovery", "system:basic-user", "system:public-info-viewer"} {
		cp.kubectl("get", "clusterrolebinding", name)
	}
	widgets := manifest(t, "widgets.yaml", `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: widgets-view
  labels:
    rbac.authorization.k8s.io/aggregate-to-view: "true"
rules:
- apiGroups: ["example.com"]
  resources: ["widgets"]
  verbs: ["get", "list", "watch"]
`)
	cp.kubectl("apply", "-f", widgets)
	deadline := time.Now().Add(30 * time.Second)
	for {
		view := cp.kubectl("get", "clusterrole", "view", "-o", "jsonpath={.rules[*].resources}")
		admin := cp.kubectl("get", "clusterrole", "admin", "-o", "jsonpath={.rules[*].resources}")
		if strings.Contains(view, "widgets") && strings.Contains(view, "configmaps") && strings.Contains(admin, "widgets") && strings.Contains(admin, "rolebindings") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("view and admin did not aggregate: view %s, admin %s", view, admin)
		}
		time.Sleep(50 * time.Millisecond)
	}

	cp.kubectl("create", "clusterrole", "impersonate-bob", "--verb=impersonate", "--resource=users", "--resource-name=bob")
	cp.kubectl("create", "clusterrolebinding", "carol-as-bob", "--clusterrole=impersonate-bob", "--user=carol")
	for deadline := time.Now().Add(30 * time.Second); ; {
		out, _, _ := cp.kubectlErr("auth", "can-i", "impersonate", "users/bob", "--as=carol")
		if strings.TrimSpace(out) == "yes" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("carol's impersonation grant did not apply")
		}
		time.Sleep(20 * time.Millisecond)
	}
	out, errOut, err := kubectlWith(carol, "--as=bob", "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
	if err != nil || out != "bob" {
		t.Errorf("carol as bob: %v %q %s", err, out, errOut)
	}
	_, errOut, err = kubectlWith(carol, "--as=dave", "get", "--raw", "/api")
	if want := `users "dave" is forbidden: User "carol" cannot impersonate resource "users" in API group "" at the cluster scope`; err == nil || !strings.Contains(errOut, want) {
		t.Errorf("carol as dave: %v %s, want %s", err, errOut, want)
	}
	_, errOut, err = kubectlWith(carol, "--as=bob", "--as-group=system:masters", "get", "--raw", "/api")
	if want := `groups "system:masters" is forbidden: User "carol" cannot impersonate resource "groups" in API group "" at the cluster scope`; err == nil || !strings.Contains(errOut, want) {
		t.Errorf("carol as bob in system:masters: %v %s, want %s", err, errOut, want)
	}
}

// hasRow reports whether a table kubectl printed has a row whose first
// cell is first and whose last cell is last ("" for any).
func hasRow(table, first, last string) bool {
	for _, line := range strings.Split(table, "\n") {
		fields := strings.Fields(line)
		if len(fields) > 0 && fields[0] == first && (last == "" || strings.HasSuffix(strings.TrimSpace(line), last)) {
			return true
		}
	}
	return false
}
