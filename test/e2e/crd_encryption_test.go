package e2e

import (
	"os/exec"
	"strings"
	"testing"
)

// crdEncryptionConfig is an EncryptionConfiguration that encrypts
// widgets.example.com with aescbc, reading values in clear too when
// withIdentity.
func crdEncryptionConfig(t *testing.T, withIdentity bool) string {
	t.Helper()
	cfg := `apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [widgets.example.com]
  providers:
  - aescbc: {keys: [{name: crdkey, secret: AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=}]}
`
	if withIdentity {
		cfg += "  - identity: {}\n"
	}
	return manifest(t, "encryption.yaml", cfg)
}

// TestCRDEncryptionAtRest: an EncryptionConfiguration naming a custom
// resource ("widgets.example.com", as kube-apiserver's file names one)
// encrypts its objects: a widget created with kubectl reads back in clear
// with kubectl, its text is nowhere in the store's files once meridian
// stopped; a ConfigMap, which the file does not name, is stored in
// clear. A widget created before the file named widgets (stored in
// clear) is encrypted by `meridian storage-migrate`, which leaves the
// other alone: after a restart with a file that no longer reads values
// in clear (no identity), both widgets read back as written. (Reading
// one without the key is lib/storagecrypt's TestCustomResources.)
func TestCRDEncryptionAtRest(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	cp.createNamespace("demo")
	cp.kubectl("apply", "-f", manifest(t, "crd.yaml", widgetCRD))
	cp.waitEstablished("widgets.example.com")
	cp.kubectl("-n", "demo", "apply", "-f", manifest(t, "early.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: early}\nspec: {size: e2e-early-plain}\n"))
	dataDir := cp.dataDir
	cp.stop()

	cfg := crdEncryptionConfig(t, true)
	cp = start(t, dataDir, "--encryption-provider-config", cfg)
	cp.waitEstablished("widgets.example.com")
	cp.kubectl("-n", "demo", "apply", "-f", manifest(t, "w.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: secretive}\nspec: {size: e2e-widget-plain}\n"))
	cp.kubectl("-n", "demo", "create", "configmap", "open", "--from-literal=mode=e2e-config-plain")
	if got := cp.kubectl("-n", "demo", "get", "widget", "secretive", "-o", "jsonpath={.spec.size}"); got != "e2e-widget-plain" {
		t.Fatalf("kubectl get widget: %q", got)
	}
	if got := cp.kubectl("-n", "demo", "get", "widgets", "-o", "jsonpath={.items[*].spec.size}"); got != "e2e-early-plain e2e-widget-plain" {
		t.Fatalf("kubectl get widgets: %q", got)
	}
	// Two widgets: early is stored in clear, secretive with crdkey.
	store := logField(readyLine(cp.logs.String()), "store")
	migrate := exec.Command(binary, "storage-migrate", "--data-dir", dataDir, "--endpoints", store, "--encryption-provider-config", cfg)
	out, err := migrate.CombinedOutput()
	if err != nil {
		t.Fatalf("meridian storage-migrate: %v\n%s", err, out)
	}
	if !strings.Contains(strings.Join(strings.Fields(string(out)), " "), "widgets.example.com 2 1 1 0") {
		t.Errorf("meridian storage-migrate reported:\n%s\nwant widgets.example.com 2 1 1 0", out)
	}
	cp.stop()
	// early's text stays in the store's history (not compacted) from
	// before the migration; secretive's was never written in clear.
	found := inStoreFiles(t, dataDir, "e2e-widget-plain", "e2e-config-plain", "k8s:enc:aescbc:v1:crdkey:")
	if found["e2e-widget-plain"] || !found["e2e-config-plain"] || !found["k8s:enc:aescbc:v1:crdkey:"] {
		t.Fatalf("in the store's files: %v; want the ConfigMap's text and the aescbc prefix only", found)
	}

	cp = start(t, dataDir, "--encryption-provider-config", crdEncryptionConfig(t, false))
	cp.waitEstablished("widgets.example.com")
	for name, want := range map[string]string{"early": "e2e-early-plain", "secretive": "e2e-widget-plain"} {
		if got := cp.kubectl("-n", "demo", "get", "widget", name, "-o", "jsonpath={.spec.size}"); got != want {
			t.Errorf("after the migration and a restart without identity, kubectl get widget %s: %q", name, got)
		}
	}
}
