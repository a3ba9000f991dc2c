package integration

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/internal/allinone"
	"github.com/meridian-cp/meridian/internal/storagemigrate"
	"github.com/meridian-cp/meridian/lib/storagecrypt/kmstest"
	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// Keys of the encryption tests (base64 of 32 bytes each).
const (
	encKey1 = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	encKey2 = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8="
	encKeyX = "QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8="
)

// encryptionConfig writes an EncryptionConfiguration that encrypts
// Secrets with providers (YAML flow mappings) into the test's temporary
// directory and returns its path.
func encryptionConfig(t *testing.T, providers ...string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n")
	for _, p := range providers {
		b.WriteString("  - " + p + "\n")
	}
	path := filepath.Join(t.TempDir(), "encryption.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// aescbc is an aescbc provider with keys, each "name=secret".
func aescbc(keys ...string) string { return keyed("aescbc", keys...) }

func keyed(kind string, keys ...string) string {
	var ks []string
	for _, k := range keys {
		name, secret, _ := strings.Cut(k, "=")
		ks = append(ks, "{name: "+name+", secret: "+secret+"}")
	}
	return kind + ": {keys: [" + strings.Join(ks, ", ") + "]}"
}

// withEncryption starts an env with the encryption configuration at
// path, on dataDir when it is not empty.
func withEncryption(path, dataDir string, disableWatchfanout bool) func(*allinone.Config) {
	return func(c *allinone.Config) {
		c.EncryptionProviderConfig, c.DisableWatchfanout = path, disableWatchfanout
		if dataDir != "" {
			c.DataDir = dataDir
		}
	}
}

// restart closes e and starts a control plane on its data with tune.
func (e *env) restart(t *testing.T, tune func(*allinone.Config)) *env {
	t.Helper()
	if err := e.cp.Close(); err != nil {
		t.Fatal(err)
	}
	return newEnv(t, func(c *allinone.Config) { tune(c); c.DataDir = e.dataDir })
}

// storedValue reads the value the store holds under key, with the
// gateway's certificate.
func (e *env) storedValue(ctx context.Context, t *testing.T, key string) *storev1.KeyValue {
	t.Helper()
	r, err := storev1.NewKVServiceClient(e.storeConn(gatewayCert)).Range(ctx, &storev1.RangeRequest{Key: []byte(key)})
	if err != nil || len(r.GetKvs()) != 1 {
		t.Fatalf("%s in the store: %v, %v", key, err, r)
	}
	return r.GetKvs()[0]
}

// storeFiles returns which of needles occur in some file under dir: the
// store's pebble files (its WAL among them) and its raft log.
func storeFiles(t *testing.T, dir string, needles ...string) map[string]bool {
	t.Helper()
	found := map[string]bool{}
	files := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		for _, n := range needles {
			if bytes.Contains(data, []byte(n)) {
				found[n] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Fatalf("no files under %s", dir)
	}
	return found
}

// createSecrets creates Secrets name-0 … in ns, each with data
// password=<prefix>-<i>, and returns them by name.
func createSecrets(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, prefix string, n int) map[string]string {
	t.Helper()
	want := map[string]string{}
	for i := range n {
		name := fmt.Sprintf("s-%d", i)
		pw := fmt.Sprintf("%s-%d", prefix, i)
		if _, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "db"}},
			Data: map[string][]byte{"password": []byte(pw)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		want[name] = pw
	}
	return want
}

// checkSecretReads reads the Secrets of ns every way a client can, in
// JSON and protobuf, and checks that each read holds want (name →
// password): consistent GETs (the store), GETs at resourceVersion 0 and
// lists (watchfanout, or the store when it is disabled), lists in chunks,
// lists at an exact resourceVersion (the store: streamed JSON, spliced
// protobuf), and a watch's initial events.
func checkSecretReads(ctx context.Context, t *testing.T, e *env, ns string, want map[string]string) {
	t.Helper()
	for _, ct := range []string{"application/json", "application/vnd.kubernetes.protobuf"} {
		secrets := e.clientFor(t, ct).CoreV1().Secrets(ns)
		check := func(how string, items []corev1.Secret) {
			t.Helper()
			got := map[string]string{}
			for _, s := range items {
				got[s.Name] = string(s.Data["password"])
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s, %s: read %v, want %v", ct, how, got, want)
			}
		}
		var items []corev1.Secret
		for name := range want {
			s, err := secrets.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s: get %s: %v", ct, name, err)
			}
			items = append(items, *s)
		}
		check("consistent GETs", items)
		items = nil
		for name := range want {
			s, err := secrets.Get(ctx, name, metav1.GetOptions{ResourceVersion: "0"})
			if err != nil {
				t.Fatalf("%s: get %s at 0: %v", ct, name, err)
			}
			items = append(items, *s)
		}
		check("GETs at resourceVersion 0", items)
		list, err := secrets.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("%s: list: %v", ct, err)
		}
		check("list", list.Items)
		items = nil
		for cont := ""; ; {
			page, err := secrets.List(ctx, metav1.ListOptions{Limit: 2, Continue: cont, LabelSelector: "app=db"})
			if err != nil {
				t.Fatalf("%s: list in chunks: %v", ct, err)
			}
			items = append(items, page.Items...)
			if cont = page.Continue; cont == "" {
				break
			}
		}
		check("list in chunks, with a label selector", items)
		exact, err := secrets.List(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		if err != nil {
			t.Fatalf("%s: list at exactly %s: %v", ct, list.ResourceVersion, err)
		}
		check("list at an exact resourceVersion", exact.Items)
		yes := true
		w, err := secrets.Watch(ctx, metav1.ListOptions{SendInitialEvents: &yes, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
		if err != nil {
			t.Fatalf("%s: watch: %v", ct, err)
		}
		items = nil
		for ev := next(t, w); ev.Type != watch.Bookmark; ev = next(t, w) {
			s, ok := ev.Object.(*corev1.Secret)
			if ev.Type != watch.Added || !ok {
				t.Fatalf("%s: initial watch event %s %T", ct, ev.Type, ev.Object)
			}
			items = append(items, *s)
		}
		w.Stop()
		check("a watch's initial events", items)
	}
}

// TestSecretsEncryptedAtRest writes Secrets through the API with an aescbc
// key configured and reads the store's own files — pebble's and the raft
// log — for their plain text: none holds it, the k8s:enc:aescbc prefix is
// there, and the store's value under each Secret's key is
// k8s:enc:aescbc:v1:key1:… A ConfigMap, which the configuration does not
// name, is found in clear in the same files, so the search sees what was
// just written. Every read (gets, lists, chunks, exact lists, watches, in
// JSON and protobuf, through watchfanout and through the store, before
// and after a restart) returns the plain Secret, and a live watch sees a
// change of one.
func TestSecretsEncryptedAtRest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cfg := encryptionConfig(t, aescbc("key1="+encKey1))
	e := newEnv(t, withEncryption(cfg, "", false))
	want := createSecrets(ctx, t, e.client, "default", "hunter2-plain", 4)
	if _, err := e.client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "control"},
		Data: map[string]string{"k": "control-plain-text"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name := range want {
		v := e.storedValue(ctx, t, "/registry/secrets/default/"+name).GetValue()
		if !bytes.HasPrefix(v, []byte("k8s:enc:aescbc:v1:key1:")) || bytes.Contains(v, []byte("hunter2-plain")) {
			t.Fatalf("the store holds %s as %q", name, v)
		}
	}
	checkSecretReads(ctx, t, e, "default", want)

	// A live watch sees a change, decrypted.
	secrets := e.client.CoreV1().Secrets("default")
	s0, err := secrets.Get(ctx, "s-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := secrets.Watch(ctx, metav1.ListOptions{ResourceVersion: s0.ResourceVersion, FieldSelector: "metadata.name=s-0"})
	if err != nil {
		t.Fatal(err)
	}
	s0.Data["password"] = []byte("hunter2-plain-changed")
	if _, err := secrets.Update(ctx, s0, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, w); ev.Type != watch.Modified || string(ev.Object.(*corev1.Secret).Data["password"]) != "hunter2-plain-changed" {
		t.Fatalf("watch event %s %+v", ev.Type, ev.Object)
	}
	w.Stop()
	want["s-0"] = "hunter2-plain-changed"

	needles := []string{"hunter2-plain", "control-plain-text", "k8s:enc:aescbc:v1:key1:"}
	storeDir := filepath.Join(e.dataDir, "store")
	check := func(when string) {
		t.Helper()
		found := storeFiles(t, storeDir, needles...)
		if found["hunter2-plain"] {
			t.Errorf("%s: a Secret's data is in clear in the store's files", when)
		}
		if !found["control-plain-text"] || !found["k8s:enc:aescbc:v1:key1:"] {
			t.Errorf("%s: the store's files hold the ConfigMap in clear: %t, the encrypted Secrets: %t; want both",
				when, found["control-plain-text"], found["k8s:enc:aescbc:v1:key1:"])
		}
	}
	check("while running")

	// The store path (watchfanout off) after a restart, which reads the
	// files back.
	e = e.restart(t, withEncryption(cfg, "", true))
	checkSecretReads(ctx, t, e, "default", want)
	if err := e.cp.Close(); err != nil {
		t.Fatal(err)
	}
	check("after shutdown")
}

// TestEncryptionKeyRotation rotates the key as kube-apiserver's
// documentation does: a new key is added second (reads only), moved
// first (it encrypts new writes; values of the old key read as stale),
// `meridian storage-migrate` rewrites every stale Secret with it (a
// guarded no-op update: each gets a new resourceVersion and nothing else
// changes; a second run finds nothing to do), and the old key is removed:
// everything still reads. An unchanged update of a stale Secret writes it
// again, re-encrypted (kubectl replace works as the migration); one of a
// current Secret writes nothing.
func TestEncryptionKeyRotation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	e := newEnv(t, withEncryption(encryptionConfig(t, aescbc("key1="+encKey1)), "", false))
	want := createSecrets(ctx, t, e.client, "default", "rotate-me", 6)
	key := func(name string) string { return "/registry/secrets/default/" + name }
	written := func(name string) string {
		v := e.storedValue(ctx, t, key(name)).GetValue()
		return string(v[:min(len(v), len("k8s:enc:aescbc:v1:key1:"))])
	}

	// Step 1: key2 known, not used.
	e = e.restart(t, withEncryption(encryptionConfig(t, aescbc("key1="+encKey1, "key2="+encKey2)), "", false))
	if _, err := e.client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "step1", Labels: map[string]string{"app": "db"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if w := written("step1"); w != "k8s:enc:aescbc:v1:key1:" {
		t.Fatalf("with key2 second, a create wrote %q", w)
	}
	want["step1"] = ""

	// Step 2: key2 first.
	cfg2 := encryptionConfig(t, aescbc("key2="+encKey2, "key1="+encKey1))
	e = e.restart(t, withEncryption(cfg2, "", false))
	checkSecretReads(ctx, t, e, "default", want)
	if _, err := e.client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "step2", Labels: map[string]string{"app": "db"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want["step2"] = ""
	if w := written("step2"); w != "k8s:enc:aescbc:v1:key2:" {
		t.Fatalf("with key2 first, a create wrote %q", w)
	}
	if w := written("s-0"); w != "k8s:enc:aescbc:v1:key1:" {
		t.Fatalf("a read rewrote s-0: %q", w)
	}
	// An unchanged update: of a Secret under key1 it writes, of one under
	// key2 it does not.
	secrets := e.client.CoreV1().Secrets("default")
	for name, wantWrite := range map[string]bool{"s-5": true, "step2": false} {
		cur, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, err := secrets.Update(ctx, cur, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if (got.ResourceVersion != cur.ResourceVersion) != wantWrite || written(name) != "k8s:enc:aescbc:v1:key2:" {
			t.Errorf("unchanged update of %s: resourceVersion %s → %s, stored %q; want a write: %t",
				name, cur.ResourceVersion, got.ResourceVersion, written(name), wantWrite)
		}
	}

	// The migration, dry run first.
	before, err := secrets.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// migrate runs the command and returns its line for Secrets: objects,
	// stale, rewritten, failed.
	migrate := func(extra ...string) string {
		t.Helper()
		var out, logs bytes.Buffer
		args := append([]string{"--data-dir", e.dataDir, "--endpoints", e.cp.StoreAddr, "--encryption-provider-config", cfg2}, extra...)
		if err := storagemigrate.Command(ctx, args, &out, &logs); err != nil {
			t.Fatalf("storage-migrate %v: %v\n%s%s", extra, err, out.String(), logs.String())
		}
		for _, line := range strings.Split(out.String(), "\n") {
			if f := strings.Fields(line); len(f) == 5 && f[0] == "secrets" {
				return strings.Join(f[1:], " ")
			}
		}
		t.Fatalf("storage-migrate %v reported no Secrets:\n%s", extra, out.String())
		return ""
	}
	// 8 Secrets: s-0 … s-5, step1, step2; s-5 and step2 are current.
	if got := migrate("--dry-run"); got != "8 6 0 0" {
		t.Errorf("dry run: %s, want 8 6 0 0", got)
	}
	if w := written("s-0"); w != "k8s:enc:aescbc:v1:key1:" {
		t.Fatalf("a dry run rewrote s-0: %q", w)
	}
	if got := migrate(); got != "8 6 6 0" {
		t.Errorf("migration: %s, want 8 6 6 0", got)
	}
	for name := range want {
		if w := written(name); w != "k8s:enc:aescbc:v1:key2:" {
			t.Errorf("after the migration %s is stored with %q", name, w)
		}
	}
	after, err := secrets.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rvs := map[string]string{}
	for _, s := range before.Items {
		rvs[s.Name] = s.ResourceVersion
	}
	for _, s := range after.Items {
		moved := s.ResourceVersion != rvs[s.Name]
		if moved != (s.Name != "s-5" && s.Name != "step2") {
			t.Errorf("%s: resourceVersion %s → %s", s.Name, rvs[s.Name], s.ResourceVersion)
		}
	}
	if got := migrate(); got != "8 0 0 0" {
		t.Errorf("a second migration: %s, want 8 0 0 0", got)
	}

	// Step 3: key1 gone.
	e = e.restart(t, withEncryption(encryptionConfig(t, aescbc("key2="+encKey2)), "", false))
	checkSecretReads(ctx, t, e, "default", want)
}

// TestEncryptionWrongKey: a Secret the configuration cannot decrypt —
// the key's bytes changed, or the configuration lost the provider, or
// the gateway runs with no configuration at all — is a 500 whose message
// names the key and why, on a get, a list (watchfanout's and the
// store's), an update, a delete, and an ERROR event on a watch; nothing panics and
// the rest of the API serves on.
func TestEncryptionWrongKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	e := newEnv(t, withEncryption(encryptionConfig(t, keyed("aesgcm", "key1="+encKey1)), "", false))
	createSecrets(ctx, t, e.client, "default", "lost", 1)
	for _, tc := range []struct {
		name, config, why string
	}{
		{"other key bytes", encryptionConfig(t, keyed("aesgcm", "key1="+encKeyX)), `aesgcm key "key1": cipher: message authentication failed`},
		{"provider gone", encryptionConfig(t, aescbc("key2="+encKey2)), `no provider configured for secrets reads values written by "k8s:enc:aesgcm:v1:key1"`},
		{"no configuration", "", `the value is encrypted ("k8s:enc:aesgcm:v1:key1") but no encryption provider is configured for secrets`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e = e.restart(t, withEncryption(tc.config, "", false))
			msg := "failed to decrypt the stored value of /registry/secrets/default/s-0: " + tc.why
			is500 := func(what string, err error) {
				t.Helper()
				if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), msg) {
					t.Errorf("%s: %v; want a 500 saying %q", what, err, msg)
				}
			}
			secrets := e.client.CoreV1().Secrets("default")
			_, err := secrets.Get(ctx, "s-0", metav1.GetOptions{})
			is500("get", err)
			_, err = secrets.Get(ctx, "s-0", metav1.GetOptions{ResourceVersion: "0"})
			is500("get at resourceVersion 0 (watchfanout)", err)
			list, err := secrets.List(ctx, metav1.ListOptions{})
			is500("list (watchfanout)", err)
			if list != nil && len(list.Items) > 0 {
				t.Errorf("the list returned %d Secrets", len(list.Items))
			}
			_, err = secrets.List(ctx, metav1.ListOptions{LabelSelector: "app=db"})
			is500("list with a label selector (watchfanout)", err)
			_, err = secrets.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=s-0"})
			is500("list of s-0 by name (watchfanout)", err)
			if l, err := secrets.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=other"}); err != nil || len(l.Items) != 0 {
				t.Errorf("list of another name: %v, %v", l, err)
			}
			rv := e.storedValue(ctx, t, "/registry/secrets/default/s-0").GetModRevision()
			_, err = secrets.List(ctx, metav1.ListOptions{ResourceVersion: fmt.Sprint(rv), ResourceVersionMatch: metav1.ResourceVersionMatchExact})
			is500("list at an exact resourceVersion (the store)", err)
			_, err = secrets.Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s-0"}}, metav1.UpdateOptions{})
			is500("update", err)
			is500("delete", secrets.Delete(ctx, "s-0", metav1.DeleteOptions{}))
			yes := true
			for _, selector := range []string{"", "app=db"} {
				w, err := secrets.Watch(ctx, metav1.ListOptions{SendInitialEvents: &yes, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true, LabelSelector: selector})
				if err != nil {
					t.Fatal(err)
				}
				ev := next(t, w)
				w.Stop()
				if st, ok := ev.Object.(*metav1.Status); ev.Type != watch.Error || !ok || st.Code != 500 || !strings.Contains(st.Message, msg) {
					t.Errorf("watch (selector %q): %s %+v; want an ERROR event with a 500 saying %q", selector, ev.Type, ev.Object, msg)
				}
			}
			// The rest serves.
			if _, err := e.client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-" + strings.ReplaceAll(tc.name, " ", "-")}}, metav1.CreateOptions{}); err != nil {
				t.Errorf("a ConfigMap create: %v", err)
			}
			// (Named to sort after s-0, which the lists above fail on.)
			if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "z-" + strings.ReplaceAll(tc.name, " ", "-")}}, metav1.CreateOptions{}); err != nil {
				t.Errorf("a Secret create: %v", err)
			}
		})
	}
}

// TestEncryptionKMSv2 encrypts Secrets through a KMS v2 plugin on a Unix
// socket: the store holds k8s:enc:kms:v2:vault:… and no plain text; every
// read decrypts, after a restart too (the data key decrypted again by the
// plugin). After the plugin's key rotates, new writes carry its new key
// id and the migration rewrites the others. Without the plugin, writes
// fail with the reason and /readyz names kms-providers.
func TestEncryptionKMSv2(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	plugin := kmstest.Start(t)
	cfg := encryptionConfig(t, "kms: {apiVersion: v2, name: vault, endpoint: "+plugin.Endpoint+"}")
	e := newEnv(t, withEncryption(cfg, "", false))
	want := createSecrets(ctx, t, e.client, "default", "kms-plain", 3)
	for name := range want {
		v := e.storedValue(ctx, t, "/registry/secrets/default/"+name).GetValue()
		if !bytes.HasPrefix(v, []byte("k8s:enc:kms:v2:vault:")) || bytes.Contains(v, []byte("kms-plain")) || !bytes.Contains(v, []byte("key-1")) {
			t.Fatalf("the store holds %s as %q", name, v)
		}
	}
	checkSecretReads(ctx, t, e, "default", want)
	if found := storeFiles(t, filepath.Join(e.dataDir, "store"), "kms-plain", "k8s:enc:kms:v2:vault:"); found["kms-plain"] || !found["k8s:enc:kms:v2:vault:"] {
		t.Errorf("in the store's files: plain text %t, KMS values %t", found["kms-plain"], found["k8s:enc:kms:v2:vault:"])
	}

	newID := plugin.Rotate()
	e = e.restart(t, withEncryption(cfg, "", true))
	checkSecretReads(ctx, t, e, "default", want)
	var out, logs bytes.Buffer
	if err := storagemigrate.Command(ctx, []string{"--data-dir", e.dataDir, "--endpoints", e.cp.StoreAddr, "--encryption-provider-config", cfg}, &out, &logs); err != nil {
		t.Fatalf("storage-migrate: %v\n%s", err, logs.String())
	}
	for name := range want {
		if v := e.storedValue(ctx, t, "/registry/secrets/default/"+name).GetValue(); !bytes.Contains(v, []byte(newID)) {
			t.Errorf("after the migration %s is stored as %q, without key id %s", name, v, newID)
		}
	}
	checkSecretReads(ctx, t, e, "default", want)

	plugin.Stop()
	_, err := e.client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "no-kms"}}, metav1.CreateOptions{})
	if err == nil {
		// The data key stays usable for writes while the plugin's
		// Status has not failed yet (kube-apiserver's rule); readiness
		// is checked below.
		t.Log("a create with the plugin just stopped succeeded on the current data key")
	}
	e = e.restart(t, withEncryption(cfg, "", false))
	_, err = e.client.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "no-kms-2"}}, metav1.CreateOptions{})
	if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), `kms provider "vault" has no data key`) {
		t.Errorf("a create without the plugin: %v", err)
	}
	body, err := e.client.CoreV1().RESTClient().Get().AbsPath("/readyz").Param("verbose", "").DoRaw(ctx)
	if err == nil || !strings.Contains(string(body), "[-]kms-providers failed") {
		t.Errorf("/readyz without the plugin: %v\n%s", err, body)
	}
}
