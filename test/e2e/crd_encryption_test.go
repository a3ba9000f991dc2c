package e2e

import (
	"testing"
)

// TestCRDEncryptionAtRest: an EncryptionConfiguration naming a custom
// resource ("widgets.example.com", as kube-apiserver's file names one)
// encrypts its objects: a widget created with kubectl reads back in clear
// with kubectl, its text is nowhere in the store's files once meridian
// stopped, and after a restart with the same file it still reads; a
// ConfigMap, which the file does not name, is stored in clear. (Reading
// it without the key is lib/storagecrypt's TestCustomResources.)
func TestCRDEncryptionAtRest(t *testing.T) {
	requireKubectl(t)
	cfg := manifest(t, "encryption.yaml", `apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [widgets.example.com]
  providers:
  - aescbc: {keys: [{name: crdkey, secret: AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=}]}
  - identity: {}
`)
	cp := start(t, "", "--encryption-provider-config", cfg)
	cp.createNamespace("demo")
	cp.kubectl("apply", "-f", manifest(t, "crd.yaml", widgetCRD))
	cp.waitEstablished("widgets.example.com")
	cp.kubectl("-n", "demo", "apply", "-f", manifest(t, "w.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: secretive}\nspec: {size: e2e-widget-plain}\n"))
	cp.kubectl("-n", "demo", "create", "configmap", "open", "--from-literal=mode=e2e-config-plain")
	if got := cp.kubectl("-n", "demo", "get", "widget", "secretive", "-o", "jsonpath={.spec.size}"); got != "e2e-widget-plain" {
		t.Fatalf("kubectl get widget: %q", got)
	}
	if got := cp.kubectl("-n", "demo", "get", "widgets", "-o", "jsonpath={.items[*].spec.size}"); got != "e2e-widget-plain" {
		t.Fatalf("kubectl get widgets: %q", got)
	}
	dataDir := cp.dataDir
	cp.stop()
	found := inStoreFiles(t, dataDir, "e2e-widget-plain", "e2e-config-plain", "k8s:enc:aescbc:v1:crdkey:")
	if found["e2e-widget-plain"] || !found["e2e-config-plain"] || !found["k8s:enc:aescbc:v1:crdkey:"] {
		t.Fatalf("in the store's files: %v; want the ConfigMap's text and the aescbc prefix only", found)
	}

	cp = start(t, dataDir, "--encryption-provider-config", cfg)
	cp.waitEstablished("widgets.example.com")
	if got := cp.kubectl("-n", "demo", "get", "widget", "secretive", "-o", "jsonpath={.spec.size}"); got != "e2e-widget-plain" {
		t.Fatalf("after a restart, kubectl get widget: %q", got)
	}
}
