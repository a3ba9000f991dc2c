package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestListItemsCarryNoKind: a JSON or YAML list names its items' kind
// once, as the list's kind, and its items carry no apiVersion or kind of
// their own — as kube-apiserver writes lists (the API reference's
// GET /api/v1/services example) — whether watchfanout serves it
// (consistent, resourceVersion 0, a first chunk and its continuation) or
// the store (Exact, YAML); a single object still names its own.
func TestListItemsCarryNoKind(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, name := range []string{"k1", "k2"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": "v"}}
		if _, err := e.client.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	get := func(path, accept string, params map[string]string) []byte {
		t.Helper()
		r := e.client.CoreV1().RESTClient().Get().AbsPath(path).SetHeader("Accept", accept)
		for k, v := range params {
			r = r.Param(k, v)
		}
		body, err := r.DoRaw(ctx)
		if err != nil {
			t.Fatalf("GET %s %v: %v", path, params, err)
		}
		return body
	}
	type list struct {
		Kind     string           `json:"kind"`
		Metadata metav1.ListMeta  `json:"metadata"`
		Items    []map[string]any `json:"items"`
	}
	const path = "/api/v1/namespaces/default/configmaps"
	check := func(what string, body []byte) list {
		t.Helper()
		var l list
		if err := json.Unmarshal(body, &l); err != nil {
			t.Fatalf("%s: %v: %s", what, err, body)
		}
		if l.Kind != "ConfigMapList" || len(l.Items) == 0 {
			t.Fatalf("%s: kind %q, %d items", what, l.Kind, len(l.Items))
		}
		for i, it := range l.Items {
			if _, ok := it["kind"]; ok {
				t.Errorf("%s: item %d has a kind: %s", what, i, body)
			}
			if _, ok := it["apiVersion"]; ok {
				t.Errorf("%s: item %d has an apiVersion: %s", what, i, body)
			}
			if _, ok := it["metadata"]; !ok {
				t.Errorf("%s: item %d has no metadata: %s", what, i, body)
			}
		}
		return l
	}
	whole := check("consistent", get(path, "application/json", nil))
	check("resourceVersion 0", get(path, "application/json", map[string]string{"resourceVersion": "0"}))
	check("Exact", get(path, "application/json", map[string]string{"resourceVersion": whole.Metadata.ResourceVersion, "resourceVersionMatch": "Exact"}))
	first := check("first chunk", get(path, "application/json", map[string]string{"limit": "1"}))
	if first.Metadata.Continue == "" {
		t.Fatal("a list of two with limit 1 has no continue token")
	}
	check("continued", get(path, "application/json", map[string]string{"limit": "1", "continue": first.Metadata.Continue}))
	if y := string(get(path, "application/yaml", nil)); strings.Count(y, "kind:") != 1 || !strings.Contains(y, "kind: ConfigMapList") {
		t.Errorf("YAML list names more than its own kind:\n%s", y)
	}
	var one map[string]any
	if err := json.Unmarshal(get(path+"/k1", "application/json", nil), &one); err != nil || one["kind"] != "ConfigMap" || one["apiVersion"] != "v1" {
		t.Errorf("a single object: kind %v, apiVersion %v (%v)", one["kind"], one["apiVersion"], err)
	}
}
