package storagecrypt_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/storagecrypt"
)

var (
	standard = registry.New(registry.Standard()...)
	quiet    = slog.New(slog.DiscardHandler)
)

// Keys of the tests: base64 of 32, 16 and 32 bytes.
const (
	key32a = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	key16  = "AAECAwQFBgcICQoLDA0ODw=="
	key32b = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8="
)

const secretKey = "/registry/secrets/demo/db"

// TestProvidersRoundTrip encrypts and decrypts with each local provider:
// the stored value starts with the provider's prefix and the key's name,
// holds no plain text, differs each time (random IVs and nonces), and
// reads back.
func TestProvidersRoundTrip(t *testing.T) {
	plain := []byte("the password is hunter2")
	for _, tc := range []struct{ provider, prefix string }{
		{"aescbc: {keys: [{name: k1, secret: " + key32a + "}]}", "k8s:enc:aescbc:v1:k1:"},
		{"aesgcm: {keys: [{name: k1, secret: " + key16 + "}]}", "k8s:enc:aesgcm:v1:k1:"},
		{"secretbox: {keys: [{name: k1, secret: " + key32a + "}]}", "k8s:enc:secretbox:v1:k1:"},
		{"identity: {}", ""},
	} {
		t.Run(tc.prefix, func(t *testing.T) {
			tr := newTransformer(t, config("[secrets]", tc.provider))
			ctx := context.Background()
			a, err := tr.Encrypt(ctx, secretKey, plain)
			if err != nil {
				t.Fatal(err)
			}
			b, err := tr.Encrypt(ctx, secretKey, plain)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.HasPrefix(a, []byte(tc.prefix)) {
				t.Fatalf("stored %q, want prefix %q", a, tc.prefix)
			}
			if tc.prefix != "" && (bytes.Contains(a, plain) || bytes.Equal(a, b)) {
				t.Fatalf("the stored value shows the plain text or repeats: %q, %q", a, b)
			}
			got, stale, err := tr.Decrypt(ctx, secretKey, a)
			if err != nil || !bytes.Equal(got, plain) || stale {
				t.Fatalf("Decrypt = %q, %t, %v", got, stale, err)
			}
		})
	}
}

// TestAESGCMAuthenticatesTheKey: an aesgcm value copied under another key
// does not decrypt, as kube-apiserver binds it to its etcd key.
func TestAESGCMAuthenticatesTheKey(t *testing.T) {
	tr := newTransformer(t, config("[secrets]", "aesgcm: {keys: [{name: k1, secret: "+key32a+"}]}"))
	ctx := context.Background()
	v, err := tr.Encrypt(ctx, secretKey, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = tr.Decrypt(ctx, "/registry/secrets/demo/other", v)
	var de *storagecrypt.DecryptError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), "message authentication failed") {
		t.Fatalf("err = %v, want a DecryptError from GCM", err)
	}
}

// TestRotation follows kube-apiserver's rotation: a new key added second
// decrypts but does not encrypt; moved first it encrypts, and values of
// the old key read as stale until rewritten; once no value needs it, the
// old key goes, and values of it fail with a message naming it.
func TestRotation(t *testing.T) {
	ctx := context.Background()
	k1 := "{name: key1, secret: " + key32a + "}"
	k2 := "{name: key2, secret: " + key32b + "}"
	old := newTransformer(t, config("[secrets]", "aescbc: {keys: ["+k1+"]}"))
	v1, err := old.Encrypt(ctx, secretKey, []byte("v"))
	if err != nil {
		t.Fatal(err)
	}

	// Step 1: key2 known, key1 still writes.
	added := newTransformer(t, config("[secrets]", "aescbc: {keys: ["+k1+", "+k2+"]}"))
	if v, _ := added.Encrypt(ctx, secretKey, []byte("v")); !bytes.HasPrefix(v, []byte("k8s:enc:aescbc:v1:key1:")) {
		t.Fatalf("with key2 second, a write used %q", v[:23])
	}
	// Step 2: key2 first.
	rotated := newTransformer(t, config("[secrets]", "aescbc: {keys: ["+k2+", "+k1+"]}"))
	if _, stale, err := rotated.Decrypt(ctx, secretKey, v1); err != nil || !stale {
		t.Fatalf("a key1 value after the rotation: stale %t, err %v; want stale", stale, err)
	}
	v2, err := rotated.Encrypt(ctx, secretKey, []byte("v"))
	if err != nil || !bytes.HasPrefix(v2, []byte("k8s:enc:aescbc:v1:key2:")) {
		t.Fatalf("a write after the rotation: %q, %v", v2, err)
	}
	if _, stale, err := rotated.Decrypt(ctx, secretKey, v2); err != nil || stale {
		t.Fatalf("a key2 value: stale %t, err %v", stale, err)
	}
	// Step 3: key1 removed.
	removed := newTransformer(t, config("[secrets]", "aescbc: {keys: ["+k2+"]}"))
	if _, _, err := removed.Decrypt(ctx, secretKey, v2); err != nil {
		t.Fatal(err)
	}
	_, _, err = removed.Decrypt(ctx, secretKey, v1)
	if err == nil || !strings.Contains(err.Error(), `no aescbc key is named "key1"`) || !strings.Contains(err.Error(), secretKey) {
		t.Fatalf("a key1 value without key1: %v", err)
	}
}

// TestProviderOrder: reads go to the provider whose prefix the value
// has; anything but the first provider is stale, identity included, so
// a migration encrypts what was stored in clear, and decrypts what was
// encrypted when identity comes first.
func TestProviderOrder(t *testing.T) {
	ctx := context.Background()
	cbc := "aescbc: {keys: [{name: k1, secret: " + key32a + "}]}"
	encryptFirst := newTransformer(t, config("[secrets]", cbc, "identity: {}"))
	identityFirst := newTransformer(t, config("[secrets]", "identity: {}", cbc))
	plain := []byte("plain")
	enc, err := encryptFirst.Encrypt(ctx, secretKey, plain)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		tr        *storagecrypt.Transformer
		stored    []byte
		wantStale bool
	}{
		{"encrypting, encrypted", encryptFirst, enc, false},
		{"encrypting, plain", encryptFirst, plain, true},
		{"identity first, plain", identityFirst, plain, false},
		{"identity first, encrypted", identityFirst, enc, true},
	} {
		got, stale, err := tc.tr.Decrypt(ctx, secretKey, tc.stored)
		if err != nil || !bytes.Equal(got, plain) || stale != tc.wantStale {
			t.Errorf("%s: %q, stale %t, %v; want stale %t", tc.name, got, stale, err, tc.wantStale)
		}
	}
	if v, _ := identityFirst.Encrypt(ctx, secretKey, plain); !bytes.Equal(v, plain) {
		t.Errorf("identity first wrote %q", v)
	}
	encryptOnly := newTransformer(t, config("[secrets]", cbc))
	if _, _, err := encryptOnly.Decrypt(ctx, secretKey, plain); err == nil ||
		!strings.Contains(err.Error(), "the value is stored in clear, but identity is not among the providers configured for secrets") {
		t.Errorf("a value in clear without identity configured: %v", err)
	}
}

// TestUnconfiguredResources: resources no list names are stored as they
// are, and an encrypted value of one is an error naming it, not an
// object; wildcards select resources by group, and "events" covers the
// events.k8s.io Events, which kube-apiserver stores as core Events.
func TestUnconfiguredResources(t *testing.T) {
	ctx := context.Background()
	cbc := "aescbc: {keys: [{name: k1, secret: " + key32a + "}]}"
	tr := newTransformer(t, config("[secrets]", cbc))
	cm := "/registry/configmaps/demo/c"
	if v, _ := tr.Encrypt(ctx, cm, []byte("x")); string(v) != "x" {
		t.Fatalf("a ConfigMap was stored as %q", v)
	}
	enc, _ := tr.Encrypt(ctx, secretKey, []byte("x"))
	_, _, err := tr.Decrypt(ctx, cm, enc)
	if err == nil || !strings.Contains(err.Error(), `the value is encrypted ("k8s:enc:aescbc:v1:k1") but no encryption provider is configured for configmaps`) {
		t.Fatalf("an encrypted ConfigMap: %v", err)
	}
	if got := names(storagecrypt.Identity(standard).Resources()); got != "" {
		t.Errorf("Identity configures %s", got)
	}

	for _, tc := range []struct{ resources, want string }{
		{"[secrets]", "secrets"},
		{"['*.']", "namespaces configmaps secrets serviceaccounts events resourcequotas events"},
		{"['*.coordination.k8s.io']", "leases"},
		{"['*.*']", names(registry.Standard())}, // every resource meridian stores
		{"[events]", "events events"},
		{"[leases.coordination.k8s.io, deployments.apps]", "leases"},
	} {
		// The order of the resources is not the rule tested.
		if got := names(newTransformer(t, config(tc.resources, cbc)).Resources()); sorted(got) != sorted(tc.want) {
			t.Errorf("%s configures %q, want %q", tc.resources, got, tc.want)
		}
	}
	ev := newTransformer(t, config("[events]", cbc))
	if v, _ := ev.Encrypt(ctx, "/registry/events.k8s.io/events/demo/e", []byte("x")); !bytes.HasPrefix(v, []byte("k8s:enc:")) {
		t.Errorf("an events.k8s.io Event was stored as %q", v)
	}
}

// names lists resources' names, space-separated.
// sorted returns the words of s in order.
func sorted(s string) string {
	words := strings.Fields(s)
	slices.Sort(words)
	return strings.Join(words, " ")
}

func names(rs []*registry.Resource) string {
	var out []string
	for _, r := range rs {
		out = append(out, r.GVR.Resource)
	}
	return strings.Join(out, " ")
}

// TestWrongKey: a key of the right name with other bytes fails with the
// provider's error, never garbage; so does a value cut short.
func TestWrongKey(t *testing.T) {
	ctx := context.Background()
	for _, kind := range []string{"aescbc", "aesgcm", "secretbox"} {
		right := newTransformer(t, config("[secrets]", kind+": {keys: [{name: k1, secret: "+key32a+"}]}"))
		wrong := newTransformer(t, config("[secrets]", kind+": {keys: [{name: k1, secret: "+key32b+"}]}"))
		v, err := right.Encrypt(ctx, secretKey, []byte(strings.Repeat("secret ", 9)))
		if err != nil {
			t.Fatal(err)
		}
		if got, _, err := wrong.Decrypt(ctx, secretKey, v); err == nil {
			// AES-CBC authenticates nothing: its padding check catches
			// a wrong key 255 times in 256.
			t.Errorf("%s: a wrong key read %q", kind, got)
		} else if !strings.Contains(err.Error(), kind+` key "k1": `) {
			t.Errorf("%s: %v", kind, err)
		}
		if _, _, err := right.Decrypt(ctx, secretKey, v[:len(v)-20]); err == nil {
			t.Errorf("%s: a truncated value decrypted", kind)
		}
	}
	other := newTransformer(t, config("[secrets]", "aesgcm: {keys: [{name: k1, secret: "+key32a+"}]}"))
	v, _ := newTransformer(t, config("[secrets]", "secretbox: {keys: [{name: k1, secret: "+key32a+"}]}")).Encrypt(ctx, secretKey, []byte("x"))
	if _, _, err := other.Decrypt(ctx, secretKey, v); err == nil ||
		!strings.Contains(err.Error(), `no provider configured for secrets reads values written by "k8s:enc:secretbox:v1:k1"`) {
		t.Errorf("a secretbox value with only aesgcm configured: %v", err)
	}
}

// BenchmarkTransformer measures Encrypt and Decrypt of a 1 KiB value with
// each provider (docs/benchmarks.md, "Encryption at rest").
func BenchmarkTransformer(b *testing.B) {
	plain := bytes.Repeat([]byte("x"), 1024)
	for _, p := range []struct{ name, provider string }{
		{"identity", "identity: {}"},
		{"aescbc", "aescbc: {keys: [{name: k1, secret: " + key32a + "}]}"},
		{"aesgcm", "aesgcm: {keys: [{name: k1, secret: " + key32a + "}]}"},
		{"secretbox", "secretbox: {keys: [{name: k1, secret: " + key32a + "}]}"},
	} {
		tr := newTransformer(b, config("[secrets]", p.provider))
		ctx := context.Background()
		stored, err := tr.Encrypt(ctx, secretKey, plain)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(p.name+"/encrypt", func(b *testing.B) {
			b.SetBytes(int64(len(plain)))
			for b.Loop() {
				if _, err := tr.Encrypt(ctx, secretKey, plain); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(p.name+"/decrypt", func(b *testing.B) {
			b.SetBytes(int64(len(plain)))
			for b.Loop() {
				if _, _, err := tr.Decrypt(ctx, secretKey, stored); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCustomResources: a custom resource is encrypted when a list names
// it ("widgets.example.com"), its group ("*.example.com") or every
// resource ("*.*"), found by its store key whether or not its CRD is in
// the registry; other custom resources, and the same names under another
// group, are stored as they are.
func TestCustomResources(t *testing.T) {
	ctx := context.Background()
	cbc := "aescbc: {keys: [{name: k1, secret: " + key32a + "}]}"
	const (
		widget = "/registry/example.com/widgets/demo/w1"
		gadget = "/registry/example.com/gadgets/demo/g1"
		other  = "/registry/other.io/widgets/demo/w1"
		crd    = "/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.example.com"
	)
	for _, tc := range []struct {
		resources string
		encrypted []string
	}{
		{"[widgets.example.com]", []string{widget}},
		{"['*.example.com']", []string{widget, gadget}},
		{"['*.*']", []string{widget, gadget, other, crd, secretKey}},
		{"[secrets]", []string{secretKey}},
	} {
		tr := newTransformer(t, config(tc.resources, cbc, "identity: {}"))
		for _, key := range []string{widget, gadget, other, crd, secretKey} {
			plain := []byte(`{"spec":{"password":"hunter2"}}`)
			v, err := tr.Encrypt(ctx, key, plain)
			if err != nil {
				t.Fatal(err)
			}
			want := slices.Contains(tc.encrypted, key)
			if got := bytes.HasPrefix(v, []byte("k8s:enc:aescbc:v1:k1:")); got != want || (want && bytes.Contains(v, []byte("hunter2"))) {
				t.Errorf("%s: %s stored as %q, want encrypted %t", tc.resources, key, v, want)
			}
			got, stale, err := tr.Decrypt(ctx, key, v)
			if err != nil || stale || !bytes.Equal(got, plain) {
				t.Errorf("%s: Decrypt(%s) = %q, %t, %v", tc.resources, key, got, stale, err)
			}
		}
	}

	// Without identity, a custom resource stored in clear is an error
	// naming it; with no provider for it, an encrypted one is.
	tr := newTransformer(t, config("['*.example.com']", cbc))
	if _, _, err := tr.Decrypt(ctx, widget, []byte(`{}`)); err == nil || !strings.Contains(err.Error(), "identity is not among the providers configured for widgets.example.com") {
		t.Errorf("a widget in clear without identity: %v", err)
	}
	enc, _ := tr.Encrypt(ctx, widget, []byte("x"))
	if _, _, err := tr.Decrypt(ctx, other, enc); err == nil || !strings.Contains(err.Error(), "no encryption provider is configured for widgets.other.io") {
		t.Errorf("an encrypted value of an unconfigured custom resource: %v", err)
	}
}
