package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// aggregatedDiscovery is the Accept header of kubectl's aggregated
// discovery request.
const aggregatedDiscovery = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// TestCRDDiscovery: an established CRD's resource appears in aggregated
// discovery (/apis as an APIGroupDiscoveryList, what kubectl reads
// first) and in legacy discovery (/apis/example.com/v1), with its kind,
// scope, short names, categories and verbs; deleting the CRD removes it
// from both.
func TestCRDDiscovery(t *testing.T) {
	requireKubectl(t)
	cp := start(t, "")
	client, err := rest.HTTPClientFor(cp.restConfig())
	if err != nil {
		t.Fatal(err)
	}
	client.Timeout = 30 * time.Second
	get := func(path, accept string, into any) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, cp.url(path), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", accept)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(body, into); err != nil {
				t.Fatalf("GET %s: %v\n%s", path, err, body)
			}
		}
		return resp.StatusCode, resp.Header.Get("Content-Type")
	}
	// aggregated is what /apis says of widgets ("" when it does not list
	// them).
	aggregated := func() string {
		var list apidiscoveryv2.APIGroupDiscoveryList
		code, ct := get("/apis", aggregatedDiscovery, &list)
		if code != http.StatusOK || !strings.Contains(ct, "as=APIGroupDiscoveryList") {
			t.Fatalf("aggregated /apis: %d %s", code, ct)
		}
		for _, g := range list.Items {
			for _, v := range g.Versions {
				for _, r := range v.Resources {
					if g.Name == "example.com" && r.Resource == "widgets" {
						return fmt.Sprintf("%s/%s %s %s %v %v create=%v", g.Name, v.Version, r.ResponseKind.Kind, r.Scope, r.ShortNames, r.Categories, slices.Contains(r.Verbs, "create"))
					}
				}
			}
		}
		return ""
	}
	if got := aggregated(); got != "" {
		t.Fatalf("widgets listed before the CRD exists: %s", got)
	}

	cp.kubectl("apply", "-f", manifest(t, "crd.yaml", widgetCRD))
	cp.waitEstablished("widgets.example.com")
	eventually(t, func() string {
		if got, want := aggregated(), "example.com/v1 Widget Namespaced [wd] [all] create=true"; got != want {
			return fmt.Sprintf("aggregated discovery of widgets: %q, want %q", got, want)
		}
		return ""
	})
	var legacy metav1.APIResourceList
	if code, _ := get("/apis/example.com/v1", "application/json", &legacy); code != http.StatusOK {
		t.Fatalf("GET /apis/example.com/v1: %d", code)
	}
	i := slices.IndexFunc(legacy.APIResources, func(r metav1.APIResource) bool { return r.Name == "widgets" })
	if i < 0 || legacy.GroupVersion != "example.com/v1" {
		t.Fatalf("legacy discovery: %+v", legacy)
	}
	if r := legacy.APIResources[i]; r.Kind != "Widget" || !r.Namespaced || !slices.Equal(r.ShortNames, []string{"wd"}) || !slices.Contains(r.Verbs, "watch") {
		t.Errorf("legacy discovery of widgets: %+v", r)
	}

	cp.kubectl("delete", "crd", "widgets.example.com", "--timeout=60s")
	eventually(t, func() string {
		if got := aggregated(); got != "" {
			return "widgets still in aggregated discovery after the CRD was deleted: " + got
		}
		if code, _ := get("/apis/example.com/v1", "application/json", &metav1.APIResourceList{}); code != http.StatusNotFound {
			return fmt.Sprintf("GET /apis/example.com/v1 after the CRD was deleted: %d, want 404", code)
		}
		return ""
	})
}
