package storagecrypt_test

import (
	"strings"
	"testing"

	"github.com/meridian-cp/meridian/lib/storagecrypt"
)

// TestParseConfig reads kube-apiserver's documented example (with keys of
// valid sizes): lists with
// wildcards, identity first, several providers and keys, KMS v2 with its
// defaults.
func TestParseConfig(t *testing.T) {
	cfg, err := storagecrypt.ParseConfig([]byte(`
apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources:
      - events
    providers:
      - identity: {}
  - resources:
      - secrets
      - configmaps
      - pandas.awesome.bears.example
    providers:
      - aesgcm:
          keys:
            - name: key1
              secret: c2VjcmV0IGlzIHNlY3VyZQ==
            - name: key2
              secret: dGhpcyBpcyBwYXNzd29yZA==
      - kms:
          apiVersion: v2
          name: myKmsPlugin
          endpoint: unix:///tmp/socketfile.sock
      - aescbc:
          keys:
            - name: key1
              secret: c2VjcmV0IGlzIHNlY3VyZQ==
      - secretbox:
          keys:
            - name: key1
              secret: YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXoxMjM0NTY=
  - resources:
      - '*.apps'
    providers:
      - aescbc:
          keys:
          - name: key2
            secret: ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=
  - resources:
      - '*.*'
    providers:
      - aescbc:
          keys:
          - name: key3
            secret: AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=
`))
	if err != nil {
		t.Fatal(err)
	}
	kms := cfg.Resources[1].Providers[1].KMS
	if kms.Timeout == nil || kms.Timeout.Duration != storagecrypt.DefaultKMSTimeout {
		t.Errorf("the KMS timeout defaulted to %v", kms.Timeout)
	}
	if s := cfg.Resources[1].Providers[0].AESGCM.Keys[0].String(); strings.Contains(s, "c2Vj") {
		t.Errorf("a key prints its secret: %s", s)
	}
}

// TestConfigErrors: every problem of a configuration is reported, with
// kube-apiserver's message where it has one.
func TestConfigErrors(t *testing.T) {
	cbc := "aescbc: {keys: [{name: k1, secret: " + key32a + "}]}"
	for _, tc := range []struct {
		name, cfg string
		want      []string
	}{
		{"wrong kind", strings.Replace(config("[secrets]", cbc), "kind: EncryptionConfiguration", "kind: Nope", 1),
			[]string{`is a "Nope" of "apiserver.config.k8s.io/v1"`}},
		{"unknown field", config("[secrets]", "aescbc: {kees: []}"), []string{`unknown field "kees"`}},
		{"no resources", "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources: []\n", []string{"at least one resources entry is required"}},
		{"no providers", config("[secrets]"), []string{"resources[0].providers: Required value"}},
		{"names", config("[Secrets, '*', '*.events.k8s.io', 'foo.extensions', 'secrets.*']", cbc), []string{
			"should not contain capital letters", "use '*.' to encrypt all the resources",
			"objects are stored using the 'events' API group", "'extensions' group has been removed",
			"encrypting the same resource across groups is not supported"}},
		{"duplicate", config("[secrets, secrets]", cbc), []string{"the same resource cannot be specified multiple times"}},
		{"overlap", config("[secrets, '*.']", cbc), []string{"using overlapping resources such as 'secrets' and '*.'"}},
		{"two in one", config("[secrets]", "{identity: {}, "+cbc+"}"), []string{"more than one provider specified in a single element"}},
		{"none", config("[secrets]", "{}"), []string{"provider does not contain any of the expected providers"}},
		{"keys", config("[secrets]", "aesgcm: {keys: [{name: a, secret: '!!'}, {name: '', secret: YWJj}, {name: c}]}", "aescbc: {keys: []}"), []string{
			"secrets must be base64 encoded", "name is a mandatory field for a key", "secret is not of the expected length, got 3, expected one of [16 24 32]",
			"secret is a mandatory field for a key", "at least one keys is required"}},
		{"secretbox size", config("[secrets]", "secretbox: {keys: [{name: a, secret: "+key16+"}]}"), []string{"got 16, expected one of [32]"}},
		{"kms", config("[secrets]", "kms: {name: 'a:b', endpoint: 'tcp://x', cachesize: 10, timeout: 0s}", "kms: {apiVersion: v2, name: k, endpoint: unix:///k.sock}",
			"kms: {apiVersion: v2, name: k, endpoint: unix:///k.sock}"), []string{
			"invalid KMS provider name a:b", "KMS v1 is deprecated and not supported", "cachesize is not supported in v2",
			"timeout should be a positive value", `unsupported scheme "tcp" for KMS provider`, "duplicate KMS provider name k"}},
		{"masked", "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n" +
			"- {resources: ['*.'], providers: [" + "{" + cbc + "}]}\n- {resources: [secrets], providers: [{identity: {}}]}\n",
			[]string{`resource "secrets" is masked by earlier rule "*."`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := storagecrypt.ParseConfig([]byte(tc.cfg))
			if err == nil {
				t.Fatal("the configuration was accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
}
