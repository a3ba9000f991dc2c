package e2e

import (
	"bytes"
	"encoding/base64"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// writeEncryptionConfig writes an EncryptionConfiguration that encrypts
// Secrets with aescbc keys ("name: secret" pairs, the first encrypting).
func writeEncryptionConfig(t *testing.T, keys ...string) string {
	t.Helper()
	var ks []string
	for _, k := range keys {
		name, secret, _ := strings.Cut(k, "=")
		ks = append(ks, "{name: "+name+", secret: "+secret+"}")
	}
	p := manifest(t, "encryption.yaml", `apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [secrets]
  providers:
  - aescbc: {keys: [`+strings.Join(ks, ", ")+`]}
  - identity: {}
`)
	return p
}

// inStoreFiles reports which of needles occur in a file of the store's
// data (its pebble files and raft log) under dataDir.
func inStoreFiles(t *testing.T, dataDir string, needles ...string) map[string]bool {
	t.Helper()
	found := map[string]bool{}
	err := filepath.WalkDir(filepath.Join(dataDir, "store"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		for _, n := range needles {
			if bytes.Contains(b, []byte(n)) {
				found[n] = true
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestEncryptionAtRestWithKubectl runs meridian with
// --encryption-provider-config as a user would: a Secret created with
// kubectl reads back with kubectl and is nowhere in clear in the store's
// files once meridian stopped, while a ConfigMap is; then the key is
// rotated with kubectl replace and `meridian storage-migrate`, and the
// Secrets still read with only the new key configured.
func TestEncryptionAtRestWithKubectl(t *testing.T) {
	requireKubectl(t)
	const (
		key1 = "key1=AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
		key2 = "key2=ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8="
	)
	cp := start(t, "", "--encryption-provider-config", writeEncryptionConfig(t, key1))
	cp.kubectl("create", "secret", "generic", "db", "--from-literal=password=e2e-secret-plain")
	cp.kubectl("create", "secret", "generic", "api", "--from-literal=token=e2e-token-plain")
	cp.kubectl("create", "configmap", "settings", "--from-literal=mode=e2e-config-plain")
	if got := cp.kubectl("get", "secret", "db", "-o", "jsonpath={.data.password}"); got != base64.StdEncoding.EncodeToString([]byte("e2e-secret-plain")) {
		t.Fatalf("kubectl get secret: %q", got)
	}
	if got := cp.kubectl("get", "secrets", "-o", "jsonpath={.items[*].metadata.name}"); got != "api db" {
		t.Fatalf("kubectl get secrets: %q", got)
	}
	dataDir := cp.dataDir
	cp.stop()
	found := inStoreFiles(t, dataDir, "e2e-secret-plain", "e2e-token-plain", "e2e-config-plain", "k8s:enc:aescbc:v1:key1:")
	if found["e2e-secret-plain"] || found["e2e-token-plain"] || !found["e2e-config-plain"] || !found["k8s:enc:aescbc:v1:key1:"] {
		t.Fatalf("in the store's files: %v; want the ConfigMap's text and the aescbc prefix only", found)
	}

	// Rotation: key2 first (after a restart with it known), then rewrite.
	rotated := writeEncryptionConfig(t, key2, key1)
	cp = start(t, dataDir, "--encryption-provider-config", rotated)
	before := cp.kubectl("get", "secret", "db", "-o", "jsonpath={.metadata.resourceVersion}")
	cp.kubectl("replace", "-f", manifest(t, "db.json", cp.kubectl("get", "secret", "db", "-o", "json")))
	if after := cp.kubectl("get", "secret", "db", "-o", "jsonpath={.metadata.resourceVersion}"); after == before {
		t.Errorf("kubectl replace of a Secret under the old key wrote nothing (resourceVersion %s)", after)
	}
	store := logField(readyLine(cp.logs.String()), "store")
	migrate := exec.Command(binary, "storage-migrate", "--data-dir", dataDir, "--endpoints", store, "--encryption-provider-config", rotated)
	out, err := migrate.CombinedOutput()
	if err != nil {
		t.Fatalf("meridian storage-migrate: %v\n%s", err, out)
	}
	// Two Secrets: db was rewritten by kubectl replace, api is left.
	if !strings.Contains(string(out), "RESOURCE") || !strings.Contains(strings.Join(strings.Fields(string(out)), " "), "secrets 2 1 1 0") {
		t.Errorf("meridian storage-migrate reported:\n%s", out)
	}
	cp.stop()
	cp = start(t, dataDir, "--encryption-provider-config", writeEncryptionConfig(t, key2))
	if got := cp.kubectl("get", "secret", "api", "-o", "jsonpath={.data.token}"); got != base64.StdEncoding.EncodeToString([]byte("e2e-token-plain")) {
		t.Fatalf("after the rotation, kubectl get secret api: %q", got)
	}
	if got := cp.kubectl("get", "secret", "db", "-o", "jsonpath={.data.password}"); got != base64.StdEncoding.EncodeToString([]byte("e2e-secret-plain")) {
		t.Fatalf("after the rotation, kubectl get secret db: %q", got)
	}
}
