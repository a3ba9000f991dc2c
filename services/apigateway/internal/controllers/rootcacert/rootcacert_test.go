package rootcacert

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meridian-cp/meridian/lib/pki/pkitest"
	"github.com/meridian-cp/meridian/lib/polltest"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/nsobject"
	"github.com/meridian-cp/meridian/services/apigateway/internal/controllers/reconcile/reconciletest"
	"github.com/meridian-cp/meridian/services/apigateway/internal/resources/resourcestest"
	corev1 "k8s.io/api/core/v1"
)

// TestPublisher, against a real store and the API's own writes: every
// namespace gets kube-root-ca.crt with the bundle and kube-controller-
// manager's annotation; an edit is undone (the user's own annotation
// kept), a delete undone, and a new bundle on disk reaches every
// namespace.
func TestPublisher(t *testing.T) {
	api := resourcestest.Start(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "ca.crt")
	first := pkitest.NewCA(t, "first").CertPEM()
	if err := os.WriteFile(file, first, 0o600); err != nil {
		t.Fatal(err)
	}
	api.Namespace("a")
	p, err := New(nsobject.Config{Registry: api.Registry, Codec: api.Codec, Store: api.Store, Objects: api.Server, Logger: api.Logger, Retry: 10 * time.Millisecond}, file, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	reconciletest.Run(t, p.Run)

	stored := func(ns string) *corev1.ConfigMap {
		obj := api.Stored("configmaps", ns, Name)
		if obj == nil {
			return nil
		}
		return obj.(*corev1.ConfigMap)
	}
	holds := func(ns string, pem []byte) func() bool {
		return func() bool {
			cm := stored(ns)
			return cm != nil && len(cm.Data) == 1 && cm.Data[DataKey] == string(pem) && cm.Annotations[DescriptionAnnotation] == Description
		}
	}
	polltest.Until(t, 30*time.Second, "kube-root-ca.crt in a", holds("a", first))
	api.Namespace("b")
	polltest.Until(t, 30*time.Second, "kube-root-ca.crt in b", holds("b", first))

	edited, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"name": Name, "annotations": map[string]string{"team": "x"}},
		"data":     map[string]string{DataKey: "not a CA", "extra": "y"},
	})
	api.Update("configmaps", "b", Name, string(edited))
	polltest.Until(t, 30*time.Second, "the edit undone", holds("b", first))
	if cm := stored("b"); cm.Annotations["team"] != "x" {
		t.Errorf("the user's annotation went: %v", cm.Annotations)
	}
	api.Delete("configmaps", "a", Name, "")
	polltest.Until(t, 30*time.Second, "the delete undone", holds("a", first))

	second := pkitest.NewCA(t, "second").CertPEM()
	bundle := append(append([]byte{}, second...), first...)
	if err := os.WriteFile(file, bundle, 0o600); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 30*time.Second, "the new bundle in a", holds("a", bundle))
	polltest.Until(t, 30*time.Second, "the new bundle in b", holds("b", bundle))

	// A file that holds no certificate is not published.
	if err := os.WriteFile(file, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(nsobject.Config{Registry: api.Registry, Codec: api.Codec, Store: api.Store, Objects: api.Server}, file, 0); err == nil {
		t.Error("a file without a certificate was accepted")
	}
}
