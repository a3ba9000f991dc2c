package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// TestCRDGarbageCollectionEncodingsAndApplyAcrossVersions: the garbage
// collector follows owner references from a built-in object to a custom
// resource and from a custom resource to a built-in object, as
// kube-apiserver's does; custom resources are not served as protobuf (406
// for protobuf alone, JSON when the client also accepts it), as upstream;
// and a server-side apply through v1 conflicts with the manager that set
// the field through v1beta1 (its managedFields entry compared at its own
// version), then takes it over with --force-conflicts.
func TestCRDGarbageCollectionEncodingsAndApplyAcrossVersions(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	cp.createNamespace("demo")
	cp.kubectl("apply", "-f", manifest(t, "crd.yaml", widgetCRD))
	cp.waitEstablished("widgets.example.com")

	// A ConfigMap owned by a widget, and a widget owned by a ConfigMap.
	cp.kubectl("-n", "demo", "apply", "-f", manifest(t, "owners.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: owner}\nspec: {size: S}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: owner}\n"))
	widgetUID := cp.kubectl("-n", "demo", "get", "widget", "owner", "-o", "jsonpath={.metadata.uid}")
	cmUID := cp.kubectl("-n", "demo", "get", "configmap", "owner", "-o", "jsonpath={.metadata.uid}")
	cp.kubectl("-n", "demo", "apply", "-f", manifest(t, "dependents.yaml", `apiVersion: v1
kind: ConfigMap
metadata:
  name: of-widget
  ownerReferences: [{apiVersion: example.com/v1, kind: Widget, name: owner, uid: `+widgetUID+`}]
---
apiVersion: example.com/v1
kind: Widget
metadata:
  name: of-configmap
  ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: owner, uid: `+cmUID+`}]
spec: {size: M}
`))
	cp.kubectl("-n", "demo", "delete", "widget", "owner")
	cp.kubectl("-n", "demo", "delete", "configmap", "owner")
	for _, obj := range []string{"configmap/of-widget", "widget/of-configmap"} {
		if _, errOut, err := cp.kubectlErr("-n", "demo", "wait", "--for=delete", "--timeout=30s", obj); err != nil {
			t.Errorf("the garbage collector left %s: %v %s", obj, err, errOut)
		}
	}

	// Encodings of a custom resource.
	cp.kubectl("-n", "demo", "apply", "-f", manifest(t, "w.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: plain}\nspec: {size: S}\n"))
	client, err := rest.HTTPClientFor(cp.restConfig())
	if err != nil {
		t.Fatal(err)
	}
	client.Timeout = 30 * time.Second
	for _, tc := range []struct {
		accept      string
		code        int
		contentType string
	}{
		{"application/vnd.kubernetes.protobuf", http.StatusNotAcceptable, "application/json"},
		{"application/vnd.kubernetes.protobuf, application/json", http.StatusOK, "application/json"},
	} {
		req, err := http.NewRequest(http.MethodGet, cp.url("/apis/example.com/v1/namespaces/demo/widgets/plain"), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", tc.accept)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.HasPrefix(resp.Header.Get("Content-Type"), tc.contentType) {
			t.Errorf("Accept %q: %d %s %s, want %d %s", tc.accept, resp.StatusCode, resp.Header.Get("Content-Type"), body, tc.code, tc.contentType)
		}
		if tc.code == http.StatusOK && !strings.Contains(string(body), `"kind":"Widget"`) {
			t.Errorf("Accept %q: body %s", tc.accept, body)
		}
	}

	// Server-side apply across versions.
	cp.kubectl("-n", "demo", "apply", "--server-side", "--field-manager=old", "-f", manifest(t, "old.yaml", "apiVersion: example.com/v1beta1\nkind: Widget\nmetadata: {name: shared}\nspec: {size: S}\n"))
	newer := manifest(t, "new.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: shared}\nspec: {size: L}\n")
	if _, errOut, err := cp.kubectlErr("-n", "demo", "apply", "--server-side", "--field-manager=new", "-f", newer); err == nil || !strings.Contains(errOut, `conflict with "old"`) || !strings.Contains(errOut, ".spec.size") {
		t.Errorf("apply through v1 over a v1beta1 manager's field: %v %s, want a conflict with \"old\" on .spec.size", err, errOut)
	}
	cp.kubectl("-n", "demo", "apply", "--server-side", "--field-manager=new", "--force-conflicts", "-f", newer)
	if got := cp.kubectl("-n", "demo", "get", "widget", "shared", "--show-managed-fields", "-o", `jsonpath={.spec.size} {range .metadata.managedFields[?(@.manager=="new")]}{.apiVersion} {.fieldsV1}{end}`); got != `L example.com/v1 {"f:spec":{"f:size":{}}}` {
		t.Errorf("after the forced apply: %q", got)
	}
}
