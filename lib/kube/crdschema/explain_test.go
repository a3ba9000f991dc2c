package crdschema

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestKubectlExplain serves the discovery and OpenAPI v3 documents of the
// widgets CRD (OpenAPIV3) to the real kubectl and checks what `kubectl
// explain` prints: the schema's fields, types, descriptions and
// enum values reach a user.
func TestKubectlExplain(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not on PATH")
	}
	crd := loadCRD(t, "widgets.yaml")
	props := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties
	spec := props["spec"]
	spec.Description = "WidgetSpec is what a widget should be."
	props["spec"] = spec
	doc, err := OpenAPIV3(crd, "v1")
	if err != nil {
		t.Fatal(err)
	}
	gv, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{
		"/api":  `{"kind":"APIVersions","versions":[]}`,
		"/apis": `{"kind":"APIGroupList","apiVersion":"v1","groups":[{"name":"example.com","versions":[{"groupVersion":"example.com/v1","version":"v1"}],"preferredVersion":{"groupVersion":"example.com/v1","version":"v1"}}]}`,
		"/apis/example.com/v1": `{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"example.com/v1","resources":[` +
			`{"name":"widgets","singularName":"widget","namespaced":true,"kind":"Widget","verbs":["get","list","create","update","patch","delete","watch"]}]}`,
		"/openapi/v3":                     `{"paths":{"apis/example.com/v1":{"serverRelativeURL":"/openapi/v3/apis/example.com/v1?hash=1"}}}`,
		"/openapi/v3/apis/example.com/v1": string(gv),
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := docs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()

	explain := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--server", srv.URL, "--cache-dir", t.TempDir(), "explain"}, args...)...)
		cmd.Env = append(cmd.Environ(), "KUBECONFIG=/dev/null", "HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl explain %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := explain("widgets.spec")
	for _, want := range []string{"GROUP:      example.com", "KIND:       Widget", "FIELD: spec <Object>", "WidgetSpec is what a widget should be.",
		"size\t<string> -required-", "enum: small, medium, large", "replicas\t<integer>", "ports\t<[]Object>", "template\t<Object>"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl explain widgets.spec lacks %q:\n%s", want, out)
		}
	}
	if out := explain("widgets.spec.template"); !strings.Contains(out, "metadata\t<ObjectMeta>") {
		t.Errorf("embedded resource has no metadata:\n%s", out)
	}
}
