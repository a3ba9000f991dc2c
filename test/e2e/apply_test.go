package e2e

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// getConfigMap reads a ConfigMap with kubectl, managedFields included.
func (cp *controlPlane) getConfigMap(ns, name string) corev1.ConfigMap {
	cp.t.Helper()
	var cm corev1.ConfigMap
	out := cp.kubectl("-n", ns, "get", "configmap", name, "-o", "json", "--show-managed-fields")
	if err := json.Unmarshal([]byte(out), &cm); err != nil {
		cp.t.Fatalf("%v: %s", err, out)
	}
	return cm
}

// fieldOwners returns the managers whose entry names data key k.
func fieldOwners(cm corev1.ConfigMap, k string) map[string]string {
	out := map[string]string{}
	for _, e := range cm.ManagedFields {
		if e.FieldsV1 != nil && strings.Contains(string(e.FieldsV1.Raw), `"f:`+k+`"`) {
			out[e.Manager] = string(e.Operation)
		}
	}
	return out
}

// TestKubectlServerSideApply drives server-side apply with the real
// kubectl: conflicts between field managers, --force-conflicts, removal of
// fields dropped from a configuration, the move from client-side apply
// (kubectl rewrites managedFields with a JSON patch), --dry-run=server, and
// managedFields in `get --show-managed-fields`.
func TestKubectlServerSideApply(t *testing.T) {
	cp := start(t, "")
	cp.kubectl("create", "namespace", "ssa")
	a := manifest(t, "a.yaml", `apiVersion: v1
kind: ConfigMap
metadata:
  name: app
  namespace: ssa
data:
  shared: from-a
  only-a: "1"
`)
	b := manifest(t, "b.yaml", `apiVersion: v1
kind: ConfigMap
metadata:
  name: app
  namespace: ssa
data:
  shared: from-b
`)
	out := cp.kubectl("apply", "--server-side", "--field-manager", "a", "-f", a)
	if !strings.Contains(out, "configmap/app serverside-applied") {
		t.Fatalf("first apply: %s", out)
	}

	// b changes a field a owns: refused, naming a and the field.
	_, errOut, err := cp.kubectlErr("apply", "--server-side", "--field-manager", "b", "-f", b)
	if err == nil || !strings.Contains(errOut, `conflict with "a"`) || !strings.Contains(errOut, ".data.shared") {
		t.Fatalf("conflicting apply: err %v\n%s", err, errOut)
	}
	if cm := cp.getConfigMap("ssa", "app"); cm.Data["shared"] != "from-a" {
		t.Fatalf("a refused apply changed the object: %v", cm.Data)
	}

	// --force-conflicts: b takes the field over.
	cp.kubectl("apply", "--server-side", "--field-manager", "b", "--force-conflicts", "-f", b)
	cm := cp.getConfigMap("ssa", "app")
	if o := fieldOwners(cm, "shared"); cm.Data["shared"] != "from-b" || o["b"] != "Apply" || o["a"] != "" {
		t.Fatalf("after --force-conflicts: data %v, owners of shared %v", cm.Data, o)
	}

	// a drops only-a from its configuration; nobody else owns it: removed.
	aLess := manifest(t, "a-less.yaml", `apiVersion: v1
kind: ConfigMap
metadata:
  name: app
  namespace: ssa
  labels:
    owner: a
`)
	cp.kubectl("apply", "--server-side", "--field-manager", "a", "-f", aLess)
	cm = cp.getConfigMap("ssa", "app")
	if _, ok := cm.Data["only-a"]; ok || cm.Data["shared"] != "from-b" || cm.Labels["owner"] != "a" {
		t.Fatalf("after a dropped only-a: data %v labels %v", cm.Data, cm.Labels)
	}

	// --dry-run=server changes nothing.
	dry := manifest(t, "dry.yaml", strings.ReplaceAll(string(must(os.ReadFile(b))), "from-b", "dry"))
	cp.kubectl("apply", "--server-side", "--field-manager", "b", "--dry-run=server", "-f", dry)
	if cm := cp.getConfigMap("ssa", "app"); cm.Data["shared"] != "from-b" {
		t.Fatalf("--dry-run=server changed the object: %v", cm.Data)
	}

	// Ordinary writes are Update entries; get shows both kinds.
	cp.kubectl("-n", "ssa", "label", "configmap", "app", "tier=web")
	y := cp.kubectl("-n", "ssa", "get", "configmap", "app", "-o", "yaml", "--show-managed-fields")
	for _, want := range []string{"managedFields:", "manager: a", "manager: b", "operation: Apply", "manager: kubectl-label", "operation: Update", "fieldsType: FieldsV1", "f:shared: {}"} {
		if !strings.Contains(y, want) {
			t.Errorf("--show-managed-fields output lacks %q:\n%s", want, y)
		}
	}
	if y := cp.kubectl("-n", "ssa", "get", "configmap", "app", "-o", "yaml"); strings.Contains(y, "managedFields") {
		t.Errorf("managedFields shown without --show-managed-fields:\n%s", y)
	}

	// From client-side to server-side apply: kubectl moves the fields of
	// kubectl-client-side-apply to its server-side manager, so the first
	// server-side apply changing them meets no conflict.
	csa := manifest(t, "csa.yaml", `apiVersion: v1
kind: ConfigMap
metadata:
  name: migrated
  namespace: ssa
data:
  k: client-side
`)
	cp.kubectl("apply", "-f", csa)
	if o := fieldOwners(cp.getConfigMap("ssa", "migrated"), "k"); o["kubectl-client-side-apply"] != "Update" {
		t.Fatalf("client-side apply owners: %v", o)
	}
	ssa := manifest(t, "ssa.yaml", strings.ReplaceAll(string(must(os.ReadFile(csa))), "client-side", "server-side"))
	cp.kubectl("apply", "--server-side", "-f", ssa)
	cm = cp.getConfigMap("ssa", "migrated")
	if o := fieldOwners(cm, "k"); cm.Data["k"] != "server-side" || o["kubectl"] != "Apply" || o["kubectl-client-side-apply"] != "" {
		t.Fatalf("after the move to server-side apply: data %v, owners %v", cm.Data, o)
	}

	// Apply creates cluster-scoped objects too.
	ns := manifest(t, "ns.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ssa-created\n  labels:\n    team: x\n")
	cp.kubectl("apply", "--server-side", "-f", ns)
	if out := cp.kubectl("get", "namespace", "ssa-created", "-o", "jsonpath={.metadata.labels.team} {.status.phase}"); out != "x Active" {
		t.Fatalf("namespace created by apply: %q", out)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
