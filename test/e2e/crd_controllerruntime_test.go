package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

var widgetGVK = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}

// widgetStatus is a reconciler of unstructured Widgets: it copies
// spec.replicas to status.replicas through the status subresource.
type widgetStatus struct{ client client.Client }

func (r *widgetStatus) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(widgetGVK)
	if err := r.client.Get(ctx, req.NamespacedName, w); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	replicas, _, _ := unstructured.NestedInt64(w.Object, "spec", "replicas")
	if cur, ok, _ := unstructured.NestedInt64(w.Object, "status", "replicas"); ok && cur == replicas {
		return ctrl.Result{}, nil
	}
	if err := unstructured.SetNestedField(w.Object, replicas, "status", "replicas"); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, r.client.Status().Update(ctx, w)
}

// TestControllerRuntimeCustomResource: a controller-runtime manager
// watches an unstructured custom kind served for a CRD applied while
// meridian runs, and writes each object's status through the status
// subresource; a spec change is seen and reconciled again, and status
// writes leave metadata.generation alone.
func TestControllerRuntimeCustomResource(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	cp.createNamespace("crt")
	cp.kubectl("apply", "-f", manifest(t, "crd.yaml", widgetCRD))
	cp.waitEstablished("widgets.example.com")

	mgr, err := ctrl.NewManager(cp.restConfig(), ctrl.Options{
		Scheme:                 runtime.NewScheme(),
		Logger:                 logr.Discard(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	w := &unstructured.Unstructured{}
	w.SetGroupVersionKind(widgetGVK)
	skipNameValidation := true
	if err := ctrl.NewControllerManagedBy(mgr).Named("widget-status").
		WithOptions(controller.Options{SkipNameValidation: &skipNameValidation}).
		For(w).Complete(&widgetStatus{client: mgr.GetClient()}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("the manager stopped with %v", err)
		}
	}()

	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			got := cp.kubectl("-n", "crt", "get", "widget", "w", "-o", "jsonpath={.spec.replicas}/{.status.replicas}/{.metadata.generation}")
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("replicas/status/generation = %q after 30s, want %q", got, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	cp.kubectl("-n", "crt", "apply", "-f", manifest(t, "w.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\nspec: {size: M, replicas: 2}\n"))
	waitFor("2/2/1")
	cp.kubectl("-n", "crt", "patch", "widget", "w", "--type=merge", "-p", `{"spec":{"replicas":4}}`)
	waitFor("4/4/2")
}
