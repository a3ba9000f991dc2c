package storagecrypt_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/storagecrypt"
	"github.com/meridian-cp/meridian/lib/storagecrypt/kmstest"
)

// kmsTransformer builds a Transformer with one KMS v2 provider for
// Secrets, polling the plugin's Status every interval.
func kmsTransformer(t *testing.T, p *kmstest.Plugin, interval time.Duration) *storagecrypt.Transformer {
	t.Helper()
	c, err := storagecrypt.ParseConfig([]byte(config("[secrets]", "kms: {apiVersion: v2, name: vault, endpoint: "+p.Endpoint+", timeout: 5s}")))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := storagecrypt.New(context.Background(), c, storagecrypt.Options{
		Registry: standard, Logger: quiet, KMSStatusInterval: interval, KMSRetryInterval: interval,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// TestKMSv2 encrypts through a KMS v2 plugin: one data key, encrypted by
// the plugin once, serves every write; a second Transformer (another
// gateway, or a restart) reads them with one Decrypt call for the data
// key, however many values use it.
func TestKMSv2(t *testing.T) {
	p := kmstest.Start(t)
	tr := kmsTransformer(t, p, time.Hour)
	ctx := context.Background()
	if err := tr.Check(ctx); err != nil {
		t.Fatal(err)
	}
	var stored [][]byte
	for i := range 20 {
		v, err := tr.Encrypt(ctx, secretKey, []byte("the secret "+string(rune('a'+i))))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(v, []byte("k8s:enc:kms:v2:vault:")) || bytes.Contains(v, []byte("the secret")) {
			t.Fatalf("stored %q", v)
		}
		stored = append(stored, v)
	}
	if _, enc, dec := p.Calls(); enc != 1 || dec != 0 {
		t.Fatalf("20 writes made %d Encrypt and %d Decrypt calls; want 1 and 0", enc, dec)
	}
	other := kmsTransformer(t, p, time.Hour)
	for i, v := range stored {
		got, stale, err := other.Decrypt(ctx, secretKey, v)
		if err != nil || string(got) != "the secret "+string(rune('a'+i)) || stale {
			t.Fatalf("value %d: %q, stale %t, %v", i, got, stale, err)
		}
	}
	if _, _, dec := p.Calls(); dec != 1 {
		t.Fatalf("reading 20 values of one data key made %d Decrypt calls, want 1", dec)
	}
	if _, _, err := other.Decrypt(ctx, "/registry/secrets/demo/elsewhere", stored[0]); err == nil {
		t.Fatal("a KMS value decrypted under another key")
	}
}

// TestKMSv2KeyRotation: when the plugin's key id changes, the next Status
// poll makes a new data key; new writes carry the new key id, and values
// under the old one read (the plugin still holds the old KEK) as stale.
func TestKMSv2KeyRotation(t *testing.T) {
	p := kmstest.Start(t)
	tr := kmsTransformer(t, p, 20*time.Millisecond)
	ctx := context.Background()
	before, err := tr.Encrypt(ctx, secretKey, []byte("v"))
	if err != nil {
		t.Fatal(err)
	}
	newID := p.Rotate()
	deadline := time.Now().Add(10 * time.Second)
	var after []byte
	for {
		if after, err = tr.Encrypt(ctx, secretKey, []byte("v")); err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(after, []byte(newID)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write used key id %s within 10s", newID)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, stale, err := tr.Decrypt(ctx, secretKey, before); err != nil || !stale {
		t.Fatalf("a value of the old key id: stale %t, %v; want stale", stale, err)
	}
	if _, stale, err := tr.Decrypt(ctx, secretKey, after); err != nil || stale {
		t.Fatalf("a value of the new key id: stale %t, %v", stale, err)
	}
}

// TestKMSv2Unavailable: without an answering plugin the Transformer still
// starts (reads of other resources go on), writes fail with the reason,
// and its health check names it.
func TestKMSv2Unavailable(t *testing.T) {
	p := kmstest.Start(t)
	p.Stop()
	c, err := storagecrypt.ParseConfig([]byte(config("[secrets]", "kms: {apiVersion: v2, name: vault, endpoint: "+p.Endpoint+", timeout: 200ms}")))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := storagecrypt.New(context.Background(), c, storagecrypt.Options{Registry: standard, Logger: quiet, KMSRetryInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx := context.Background()
	if _, err := tr.Encrypt(ctx, secretKey, []byte("v")); err == nil || !strings.Contains(err.Error(), `kms provider "vault" has no data key`) {
		t.Fatalf("a write without the plugin: %v", err)
	}
	if err := tr.Check(ctx); err == nil || !strings.Contains(err.Error(), `kms provider "vault": status`) {
		t.Fatalf("health: %v", err)
	}
	if v, err := tr.Encrypt(ctx, "/registry/configmaps/demo/c", []byte("v")); err != nil || string(v) != "v" {
		t.Fatalf("a ConfigMap write: %q, %v", v, err)
	}
}

// TestKMSv2Unhealthy: a plugin whose Status is not "ok" fails the health
// check with what it said.
func TestKMSv2Unhealthy(t *testing.T) {
	p := kmstest.Start(t)
	p.SetHealthz("the HSM is unreachable")
	tr := kmsTransformer(t, p, time.Hour)
	if err := tr.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "the HSM is unreachable") {
		t.Fatalf("health: %v", err)
	}
}

// BenchmarkKMSv2 measures Encrypt and Decrypt of a 1 KiB value with a KMS
// v2 provider whose data key is known (no plugin call per value).
func BenchmarkKMSv2(b *testing.B) {
	p := kmstest.Start(b)
	c, err := storagecrypt.ParseConfig([]byte(config("[secrets]", "kms: {apiVersion: v2, name: vault, endpoint: "+p.Endpoint+"}")))
	if err != nil {
		b.Fatal(err)
	}
	tr, err := storagecrypt.New(context.Background(), c, storagecrypt.Options{Registry: standard, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	ctx := context.Background()
	plain := bytes.Repeat([]byte("x"), 1024)
	stored, err := tr.Encrypt(ctx, secretKey, plain)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encrypt", func(b *testing.B) {
		b.SetBytes(int64(len(plain)))
		for b.Loop() {
			if _, err := tr.Encrypt(ctx, secretKey, plain); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decrypt", func(b *testing.B) {
		b.SetBytes(int64(len(plain)))
		for b.Loop() {
			if _, _, err := tr.Decrypt(ctx, secretKey, stored); err != nil {
				b.Fatal(err)
			}
		}
	})
}
