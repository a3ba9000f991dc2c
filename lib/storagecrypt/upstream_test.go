package storagecrypt_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/meridian-cp/meridian/lib/storagecrypt"
	"github.com/meridian-cp/meridian/lib/storagecrypt/kmstest"
)

// upstreamConfigs are the providers testdata/upstream-values.txt was
// written with.
var upstreamConfigs = map[string]string{
	"aescbc":    `aescbc: {keys: [{name: key1, secret: AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=}]}`,
	"aesgcm":    `aesgcm: {keys: [{name: key1, secret: AAECAwQFBgcICQoLDA0ODw==}]}`,
	"secretbox": `secretbox: {keys: [{name: key1, secret: AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=}]}`,
	"kms":       `kms: {apiVersion: v2, name: mykms, endpoint: ENDPOINT}`,
}

// TestReadsKubeAPIServerValues decrypts values kube-apiserver's own
// transformers wrote (testdata/upstream-values.txt): the stored format is
// upstream's, for every provider, KMS v2 included, so a store moves
// between the two. (The other direction, kube-apiserver reading what this
// package writes, was checked when the values were recorded.)
func TestReadsKubeAPIServerValues(t *testing.T) {
	plugin := kmstest.Start(t)
	if err := plugin.AddKey("upstream-key", bytes.Repeat([]byte{7}, 32)); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("testdata/upstream-values.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	seen := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, hexValue, _ := strings.Cut(line, " ")
		stored, err := hex.DecodeString(hexValue)
		if err != nil {
			t.Fatal(err)
		}
		prov := strings.ReplaceAll(upstreamConfigs[name], "ENDPOINT", plugin.Endpoint)
		tr := newTransformer(t, config("[secrets]", prov))
		plain, stale, err := tr.Decrypt(ctx, "/registry/secrets/ns/s1", stored)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if string(plain) != "k8s\x00 the plain secret value" || stale {
			t.Errorf("%s: read %q (stale %t)", name, plain, stale)
		}
		seen++
	}
	if seen != len(upstreamConfigs) {
		t.Fatalf("read %d values, want %d", seen, len(upstreamConfigs))
	}
}

// config is an EncryptionConfiguration with one list: resources (a YAML
// flow list) and providers, each a YAML flow mapping.
func config(resources string, providers ...string) string {
	var b strings.Builder
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: " + resources + "\n  providers:\n")
	for _, p := range providers {
		b.WriteString("  - " + p + "\n")
	}
	return b.String()
}

// newTransformer builds the Transformer of a configuration for the
// standard registry; it is closed when the test ends.
func newTransformer(t testing.TB, cfg string) *storagecrypt.Transformer {
	t.Helper()
	c, err := storagecrypt.ParseConfig([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := storagecrypt.New(context.Background(), c, storagecrypt.Options{Registry: standard, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}
