package e2e

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
)

// sprocketCRD defaults spec.color and selects on it.
const sprocketCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: sprockets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: sprockets, singular: sprocket, kind: Sprocket}
  versions:
  - name: v1
    served: true
    storage: true
    selectableFields:
    - jsonPath: .spec.color
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
              color: {type: string, default: blue}
`

// TestCRDWatchThroughWatchTier: client-go watches and lists a custom
// resource through the gateway, served by the watch tier (its
// watchfanout_watchers series for the resource counts the watch): events
// in resourceVersion order carrying the schema's default, a
// selectableFields list; deleting the CRD delivers its objects' DELETED
// events, then ends the watch, and the resource is gone.
func TestCRDWatchThroughWatchTier(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	cp.kubectl("apply", "-f", manifest(t, "sprocket-crd.yaml", sprocketCRD))
	cp.waitEstablished("sprockets.example.com")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	dyn, err := dynamic.NewForConfig(cp.restConfig())
	if err != nil {
		t.Fatal(err)
	}
	sprockets := dyn.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "sprockets"}).Namespace("default")
	list, err := sprockets.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := sprockets.Watch(ctx, metav1.ListOptions{ResourceVersion: list.GetResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	cp.waitMetric(ctx, `watchfanout_watchers\{group="example.com",resource="sprockets",service="watchfanout",version="v1"\} 1`)

	last, _ := strconv.ParseInt(list.GetResourceVersion(), 10, 64)
	expect := func(typ watch.EventType, name string) {
		t.Helper()
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch ended, want %s %s", typ, name)
			}
			u, _ := ev.Object.(*unstructured.Unstructured)
			if ev.Type != typ || u == nil || u.GetName() != name {
				t.Fatalf("got %s %v, want %s %s", ev.Type, ev.Object, typ, name)
			}
			rv, _ := strconv.ParseInt(u.GetResourceVersion(), 10, 64)
			if color, _, _ := unstructured.NestedString(u.Object, "spec", "color"); rv <= last || color != "blue" {
				t.Fatalf("%s %s at rv %d (after %d) with color %q, want a later rv and the default blue", typ, name, rv, last, color)
			}
			last = rv
		case <-ctx.Done():
			t.Fatalf("no %s %s", typ, name)
		}
	}
	for _, name := range []string{"one", "two"} {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Sprocket", "metadata": map[string]any{"name": name}, "spec": map[string]any{"size": int64(1)}}}
		if _, err := sprockets.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		expect(watch.Added, name)
	}
	one, err := sprockets.Get(ctx, "one", metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(one.Object, int64(2), "spec", "size")
	if _, err := sprockets.Update(ctx, one, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect(watch.Modified, "one")
	blue, err := sprockets.List(ctx, metav1.ListOptions{FieldSelector: "spec.color=blue"})
	if err != nil || len(blue.Items) != 2 {
		t.Fatalf("list spec.color=blue: %v %v", blue, err)
	}

	cp.kubectl("delete", "crd", "sprockets.example.com")
	var deleted []string
	for range 2 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type != watch.Deleted {
				t.Fatalf("got %v (open %v), want the objects' DELETED events", ev, ok)
			}
			deleted = append(deleted, ev.Object.(*unstructured.Unstructured).GetName())
		case <-ctx.Done():
			t.Fatalf("DELETED events after the CRD's deletion: got %v", deleted)
		}
	}
	slices.Sort(deleted)
	if fmt.Sprint(deleted) != "[one two]" {
		t.Fatalf("deleted %v", deleted)
	}
	select {
	case ev, ok := <-w.ResultChan():
		if ok {
			t.Fatalf("got %s %v after the CRD was deleted, want the watch to end", ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Fatal("the watch did not end after the CRD was deleted")
	}
	if _, err := sprockets.List(ctx, metav1.ListOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("list after the CRD was deleted: %v, want NotFound", err)
	}
}

// waitMetric waits until the control plane's /metrics has a sample line
// matching pattern (a regular expression of the whole line).
func (cp *controlPlane) waitMetric(ctx context.Context, pattern string) {
	cp.t.Helper()
	re := regexp.MustCompile(`(?m)^` + pattern + `$`)
	client := cp.client()
	var body []byte
	var err error
	for {
		body, err = client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err == nil && re.Match(body) {
			return
		}
		select {
		case <-ctx.Done():
			var lines []string
			for _, l := range strings.Split(string(body), "\n") {
				if strings.HasPrefix(l, strings.SplitN(pattern, "{", 2)[0]) {
					lines = append(lines, l)
				}
			}
			cp.t.Fatalf("no line matching %s in /metrics (err %v); its lines:\n%s", pattern, err, strings.Join(lines, "\n"))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
