package e2e

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// widgetCRD is a namespaced CRD with a status and a scale subresource,
// printer columns, a short name, a category, a selectable field and two
// versions served with conversion None (v1 stored, v1beta1 deprecated).
const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    shortNames: [wd]
    categories: [all]
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size:
                type: string
              replicas:
                type: integer
          status:
            type: object
            properties:
              replicas:
                type: integer
              selector:
                type: string
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
        labelSelectorPath: .status.selector
    selectableFields:
    - jsonPath: .spec.size
    additionalPrinterColumns:
    - name: Size
      type: string
      jsonPath: .spec.size
    - name: Replicas
      type: integer
      jsonPath: .spec.replicas
  - name: v1beta1
    served: true
    storage: false
    deprecated: true
    deprecationWarning: "example.com/v1beta1 Widget is deprecated; use example.com/v1"
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`

// waitEstablished waits until kubectl can use the CRD's resource.
func (cp *controlPlane) waitEstablished(crd string) {
	cp.t.Helper()
	cp.kubectl("wait", "--for=condition=Established", "--timeout=30s", "crd/"+crd)
}

// TestCRDKubectl: a CRD applied with kubectl is established and served
// within a second, without a restart: its objects are created, listed
// with printer columns, selected by a selectable field, read through a
// second version (apiVersion rewritten, the deprecation Warning shown),
// scaled, gone with their namespace, and gone with the CRD.
func TestCRDKubectl(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	cp.createNamespace("demo")

	began := time.Now()
	cp.kubectl("apply", "-f", manifest(t, "crd.yaml", widgetCRD))
	cp.waitEstablished("widgets.example.com")
	if d := time.Since(began); d > 20*time.Second {
		t.Errorf("the CRD took %v to be established", d)
	}
	y := cp.kubectl("get", "crd", "widgets.example.com", "-o", "yaml")
	for _, want := range []string{"type: NamesAccepted", "type: Established", "storedVersions:\n  - v1", "kind: Widget", "customresourcecleanup.apiextensions.k8s.io"} {
		if !strings.Contains(y, want) {
			t.Errorf("the CRD lacks %q:\n%s", want, y)
		}
	}
	if res := cp.kubectl("api-resources", "--api-group=example.com", "--no-headers"); !strings.Contains(res, "widgets") || !strings.Contains(res, "wd") {
		t.Errorf("api-resources does not list widgets:\n%s", res)
	}

	cp.kubectl("-n", "demo", "apply", "-f", manifest(t, "w.yaml", `apiVersion: example.com/v1
kind: Widget
metadata:
  name: small
spec:
  size: S
  replicas: 1
---
apiVersion: example.com/v1
kind: Widget
metadata:
  name: large
spec:
  size: L
  replicas: 3
`))
	got := cp.kubectl("-n", "demo", "get", "widgets")
	if !strings.Contains(got, "SIZE") || !strings.Contains(got, "REPLICAS") || !regexpLine(got, `small\s+S\s+1`) || !regexpLine(got, `large\s+L\s+3`) {
		t.Errorf("kubectl get widgets:\n%s", got)
	}
	if got := cp.kubectl("-n", "demo", "get", "wd", "--field-selector", "spec.size=L", "-o", "name"); strings.TrimSpace(got) != "widget.example.com/large" {
		t.Errorf("field selector spec.size=L: %q", got)
	}
	if got := cp.kubectl("-n", "demo", "get", "all", "-o", "name"); !strings.Contains(got, "widget.example.com/small") {
		t.Errorf("category all lacks the widgets: %q", got)
	}

	// The deprecated version: same object, its apiVersion, a Warning.
	out, errOut, err := cp.kubectlErr("-n", "demo", "get", "widgets.v1beta1.example.com", "small", "-o", "yaml")
	if err != nil {
		t.Fatalf("get through v1beta1: %v\n%s", err, errOut)
	}
	if !strings.Contains(out, "apiVersion: example.com/v1beta1") || !strings.Contains(out, "size: S") {
		t.Errorf("v1beta1 read:\n%s", out)
	}
	if !strings.Contains(errOut, "example.com/v1beta1 Widget is deprecated; use example.com/v1") {
		t.Errorf("no deprecation warning on stderr: %q", errOut)
	}

	// Scale, then the status subresource keeps spec and status apart.
	cp.kubectl("-n", "demo", "scale", "widget", "small", "--replicas=5")
	if got := cp.kubectl("-n", "demo", "get", "widget", "small", "-o", "jsonpath={.spec.replicas} {.metadata.generation}"); got != "5 2" {
		t.Errorf("after scale: replicas generation = %q, want \"5 2\"", got)
	}
	// The write through /scale is recorded as kubectl's (its user agent:
	// kubectl scale sends no fieldManager), owning spec.replicas, in an
	// entry of its own (subresource scale).
	if got := cp.kubectl("-n", "demo", "get", "widget", "small", "--show-managed-fields", "-o", `jsonpath={range .metadata.managedFields[?(@.subresource=="scale")]}{.manager} {.operation} {.fieldsV1}{end}`); got != `kubectl Update {"f:spec":{"f:replicas":{}}}` {
		t.Errorf("managedFields of the scale write: %q", got)
	}
	cp.kubectl("-n", "demo", "patch", "widget", "small", "--subresource=status", "--type=merge", "-p", `{"status":{"replicas":5},"spec":{"size":"XL"}}`)
	if got := cp.kubectl("-n", "demo", "get", "widget", "small", "-o", "jsonpath={.status.replicas} {.spec.size} {.metadata.generation}"); got != "5 S 2" {
		t.Errorf("after a status patch: %q, want \"5 S 2\"", got)
	}

	// Deleting a namespace deletes the custom resources in it.
	cp.createNamespace("gone")
	cp.kubectl("-n", "gone", "apply", "-f", manifest(t, "g.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: doomed}\nspec: {size: S}\n"))
	cp.kubectl("delete", "namespace", "gone", "--timeout=60s")
	if got := cp.kubectl("get", "widgets", "-A", "-o", "name"); strings.Contains(got, "doomed") {
		t.Errorf("a widget outlived its namespace: %q", got)
	}

	// Deleting the CRD deletes its objects, then the CRD.
	cp.kubectl("delete", "crd", "widgets.example.com", "--timeout=60s")
	if _, errOut, err := cp.kubectlErr("get", "crd", "widgets.example.com"); err == nil || !strings.Contains(errOut, "NotFound") {
		t.Errorf("the CRD is still there: %v %s", err, errOut)
	}
	cp.kubectl("apply", "-f", manifest(t, "crd.yaml", widgetCRD))
	cp.waitEstablished("widgets.example.com")
	if got := cp.kubectl("-n", "demo", "get", "widgets", "-o", "name"); strings.TrimSpace(got) != "" {
		t.Errorf("the objects outlived their CRD: %q", got)
	}
}

// regexpLine reports whether a line of out matches pattern.
func regexpLine(out, pattern string) bool {
	re := regexp.MustCompile(pattern)
	for _, l := range strings.Split(out, "\n") {
		if re.MatchString(l) {
			return true
		}
	}
	return false
}
