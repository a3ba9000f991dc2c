package crdschema

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// refs collects every "$ref" in a JSON document.
func refs(v any, out *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "$ref" {
				*out = append(*out, s)
			}
			refs(x, out)
		}
	case []any:
		for _, x := range v {
			refs(x, out)
		}
	}
}

// asJSON round-trips doc through its JSON encoding, as a client sees it.
func asJSON(t *testing.T, doc any) map[string]any {
	t.Helper()
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// dig follows keys into nested maps.
func dig(t *testing.T, m map[string]any, keys ...string) map[string]any {
	t.Helper()
	for _, k := range keys {
		next, ok := m[k].(map[string]any)
		if !ok {
			t.Fatalf("no %q under %v", k, keys)
		}
		m = next
	}
	return m
}

func TestOpenAPIV3(t *testing.T) {
	doc, err := OpenAPIV3(loadCRD(t, "widgets.yaml"), "v1")
	if err != nil {
		t.Fatal(err)
	}
	m := asJSON(t, doc)
	schemas := dig(t, m, "components", "schemas")
	widget := dig(t, schemas, "com.example.v1.Widget")
	gvk, _ := json.Marshal(widget["x-kubernetes-group-version-kind"])
	if string(gvk) != `[{"group":"example.com","kind":"Widget","version":"v1"}]` {
		t.Fatalf("gvk = %s", gvk)
	}
	props := dig(t, widget, "properties")
	if ref := dig(t, props, "metadata")["$ref"]; ref != "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" {
		t.Fatalf("metadata = %v", props["metadata"])
	}
	for _, f := range []string{"apiVersion", "kind", "spec", "status"} {
		if _, ok := props[f]; !ok {
			t.Errorf("Widget lacks property %s", f)
		}
	}
	size := dig(t, props, "spec", "properties", "size")
	if enum, _ := json.Marshal(size["enum"]); string(enum) != `["small","medium","large"]` {
		t.Errorf("size enum = %s", enum)
	}
	if nick := dig(t, props, "spec", "properties", "nickname"); nick["nullable"] != true {
		t.Errorf("v3 nickname lost nullable: %v", nick)
	}
	tmpl := dig(t, props, "spec", "properties", "template", "properties")
	for _, f := range []string{"apiVersion", "kind", "metadata"} {
		if _, ok := tmpl[f]; !ok {
			t.Errorf("embedded resource lacks %s", f)
		}
	}
	list := dig(t, schemas, "com.example.v1.WidgetList")
	if gvk, _ := json.Marshal(list["x-kubernetes-group-version-kind"]); string(gvk) != `[{"group":"example.com","kind":"WidgetList","version":"v1"}]` {
		t.Fatalf("list gvk = %s", gvk)
	}
	paths := dig(t, m, "paths")
	for _, p := range []string{
		"/apis/example.com/v1/widgets",
		"/apis/example.com/v1/namespaces/{namespace}/widgets",
		"/apis/example.com/v1/namespaces/{namespace}/widgets/{name}",
		"/apis/example.com/v1/namespaces/{namespace}/widgets/{name}/status",
		"/apis/example.com/v1/namespaces/{namespace}/widgets/{name}/scale",
	} {
		if _, ok := paths[p]; !ok {
			t.Errorf("no path %s", p)
		}
	}
	if id := dig(t, paths, "/apis/example.com/v1/namespaces/{namespace}/widgets/{name}", "get")["operationId"]; id != "readNamespacedV1Widget" {
		t.Errorf("operationId = %v", id)
	}
	checkRefs(t, m, "#/components/schemas/", schemas)
}

// checkRefs fails unless every reference in doc names a definition in defs.
func checkRefs(t *testing.T, doc map[string]any, prefix string, defs map[string]any) {
	t.Helper()
	var all []string
	refs(doc, &all)
	if len(all) == 0 {
		t.Fatal("no references")
	}
	for _, r := range all {
		name, ok := strings.CutPrefix(r, prefix)
		if _, found := defs[name]; !ok || !found {
			t.Errorf("dangling reference %s", r)
		}
	}
}

func TestOpenAPIV2(t *testing.T) {
	crd := loadCRD(t, "widgets.yaml")
	v2 := crd.Spec.Versions[0].DeepCopy()
	v2.Name, v2.Storage = "v2", false
	unserved := crd.Spec.Versions[0].DeepCopy()
	unserved.Name, unserved.Storage, unserved.Served = "v0", false, false
	crd.Spec.Versions = append(crd.Spec.Versions, *v2, *unserved)
	doc, err := OpenAPIV2(crd)
	if err != nil {
		t.Fatal(err)
	}
	m := asJSON(t, doc)
	defs := dig(t, m, "definitions")
	var names []string
	for n := range defs {
		if strings.HasPrefix(n, "com.example.") {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	if got := strings.Join(names, " "); got != "com.example.v1.Widget com.example.v1.WidgetList com.example.v2.Widget com.example.v2.WidgetList" {
		t.Fatalf("definitions = %s", got)
	}
	spec := dig(t, defs, "com.example.v2.Widget", "properties", "spec", "properties")
	if _, ok := dig(t, spec, "nickname")["nullable"]; ok {
		t.Errorf("v2 definition keeps nullable")
	}
	if _, ok := dig(t, m, "paths")["/apis/example.com/v2/namespaces/{namespace}/widgets/{name}"]; !ok {
		t.Errorf("no v2 path")
	}
	checkRefs(t, m, "#/definitions/", defs)
}
