package frontend

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestRequestMetricsAreBounded sends hundreds of requests for paths,
// groups, versions, resources, subresources, methods and dryRun values
// nobody serves, with and without credentials, and checks that they add
// no series to apiserver_request_total beyond a fixed few, while a served
// request is counted under the registry's resource.
func TestRequestMetricsAreBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newTestHandler(t, &recordingService{}, nil, func(c *Config) { c.Registerer = reg })

	// A served request, counted: the series the rest must not multiply.
	if resp, body := do(t, h, "GET", "/api/v1/namespaces/demo/configmaps/app", "good-token", nil); resp.StatusCode != 200 {
		t.Fatalf("served get: %d %s", resp.StatusCode, body)
	}
	served := series(t, reg, "apiserver_request_total")
	if len(served) != 1 || !strings.Contains(served[0], `resource="configmaps"`) {
		t.Fatalf("served get counted as %v", served)
	}

	const n = 100
	for i := range n {
		paths := []string{
			fmt.Sprintf("/nope-%d", i),
			fmt.Sprintf("/api/v%d", i),
			fmt.Sprintf("/api/v%d/namespaces/x/configmaps", i),
			fmt.Sprintf("/apis/group-%d", i),
			fmt.Sprintf("/apis/group-%d/v1", i),
			fmt.Sprintf("/apis/group-%d/v1/things-%d", i, i),
			fmt.Sprintf("/api/v1/namespaces/ns-%d/widgets-%d/w", i, i),
			fmt.Sprintf("/api/v1/namespaces/demo/configmaps/app/sub-%d", i),
			fmt.Sprintf("/readyz/check-%d", i),
			fmt.Sprintf("/openapi/v3/apis/group-%d/v1", i),
			fmt.Sprintf("/api/v1/namespaces/demo/configmaps/app?dryRun=value-%d", i),
		}
		for _, p := range paths {
			for _, token := range []string{"good-token", "", fmt.Sprintf("bad-token-%d", i)} {
				do(t, h, "GET", p, token, nil)
			}
		}
		do(t, h, fmt.Sprintf("METHOD%d", i), "/api/v1/namespaces/demo/configmaps/app", "good-token", nil)
		do(t, h, "GET", "/api/v1/namespaces/demo/configmaps/app", "good-token", map[string]string{"Impersonate-User": fmt.Sprintf("user-%d", i)})
	}

	// What may be added: the invalid dryRun of the served get, the OpenAPI
	// v3 route's 404, the list of /api/v1/namespaces/x/configmaps (i=1),
	// with slack for codes.
	got := series(t, reg, "apiserver_request_total")
	if len(got) > 6 {
		t.Errorf("%d requests for unserved paths added %d series to apiserver_request_total, the first: %s",
			35*n, len(got)-len(served), strings.Join(got[:min(len(got), 10)], "\n"))
	}
	var leaks []string
	for _, s := range got {
		for _, bad := range []string{"nope", "group-", "things-", "widgets-", "sub-", "check-", "value-", "METHOD", "ns-"} {
			if strings.Contains(s, bad) {
				leaks = append(leaks, s)
				break
			}
		}
	}
	if len(leaks) > 0 {
		t.Errorf("%d series carry what the request named, the first: %s", len(leaks), strings.Join(leaks[:min(len(leaks), 5)], "\n"))
	}
	// The labels' values are kube-apiserver's.
	if !strings.Contains(served[0], `verb="GET"`) || !strings.Contains(served[0], `scope="resource"`) || !strings.Contains(served[0], `dry_run=""`) {
		t.Errorf("served get counted as %v", served)
	}
	attempts := series(t, reg, "authentication_attempts")
	if len(attempts) < 2 || len(attempts) > 3 {
		t.Errorf("authentication_attempts: %v, want the results success, failure and error", attempts)
	}
}

// series returns the label sets of a metric family, one string each.
func series(t *testing.T, g prometheus.Gatherer, name string) []string {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			out = append(out, strings.Join(labels, ","))
		}
	}
	sort.Strings(out)
	return out
}
