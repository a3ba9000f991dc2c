package integration

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/meridian-cp/meridian/internal/allinone"
	"github.com/meridian-cp/meridian/lib/polltest"
)

// kubeMetrics are metrics of kube-apiserver and etcd with their labels,
// as the Kubernetes metrics reference
// (kubernetes.io/docs/reference/instrumentation/metrics/) and etcd's
// metrics documentation list them: the all-in-one's /metrics must export
// each under that name with exactly those labels (and the all-in-one's
// own "service", which says which service exported it).
var kubeMetrics = map[string][]string{
	"apiserver_request_total":             {"code", "component", "dry_run", "group", "resource", "scope", "subresource", "verb", "version"},
	"apiserver_request_duration_seconds":  {"component", "dry_run", "group", "resource", "scope", "subresource", "verb", "version"},
	"apiserver_response_sizes":            {"component", "group", "resource", "scope", "subresource", "verb", "version"},
	"apiserver_longrunning_requests":      {"component", "group", "resource", "scope", "subresource", "verb", "version"},
	"apiserver_current_inflight_requests": {"request_kind"},
	"apiserver_storage_objects":           {"resource"},
	"apiserver_watch_events_total":        {"group", "resource", "version"},
	"apiserver_watch_events_sizes":        {"group", "resource", "version"},

	"etcd_server_has_leader":                    nil,
	"etcd_server_is_leader":                     nil,
	"etcd_server_leader_changes_seen_total":     nil,
	"etcd_server_proposals_committed_total":     nil,
	"etcd_server_proposals_applied_total":       nil,
	"etcd_disk_wal_fsync_duration_seconds":      nil,
	"etcd_disk_backend_commit_duration_seconds": nil,
	"etcd_mvcc_db_total_size_in_bytes":          nil,
}

// kubeVerbs are the values of the verb label kube-apiserver reports.
var kubeVerbs = []string{"APPLY", "CONNECT", "CREATE", "DELETE", "DELETECOLLECTION", "GET", "LIST", "PATCH", "POST", "PROXY", "PUT", "UPDATE", "WATCH", "WATCHLIST", "other"}

// The all-in-one's /metrics, after a GET, a LIST, a create and a watch,
// exports kube-apiserver's and etcd's metrics under their names with their
// labels, the verbs as kube-apiserver reports them; and, as
// kube-apiserver, serves it only to callers allowed to get the
// non-resource URL /metrics: 403 for system:anonymous (a request without
// credentials, anonymous authentication on as by default) and for a user
// without the grant.
func TestMetricNamesAndLabels(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte(`nobody-secret,nobody,1001`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *allinone.Config) { c.TokenAuthFile = tokens })
	ctx := t.Context()
	cms := e.client.CoreV1().ConfigMaps("default")
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "m"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(ctx, "m", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := cms.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A create the watch sees: a watch event is sent (and its size
	// observed when it is queued, before it arrives).
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "watched"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(30 * time.Second)
	for seen := false; !seen; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch ended before it delivered the create")
			}
			cm, isCM := ev.Object.(*corev1.ConfigMap)
			seen = isCM && cm.Name == "watched"
		case <-timeout:
			t.Fatal("the watch did not deliver the create in 30s")
		}
	}
	w.Stop()

	// The event's size is observed right after it is queued, which may be
	// after the watcher received it, and the watch is counted once its
	// handler has seen the client go, after Stop returned: scrape until
	// both are there.
	cmLabels := map[string]string{"group": "", "version": "v1", "resource": "configmaps"}
	var families map[string]*dto.MetricFamily
	polltest.Until(t, 10*time.Second, "the watched create's apiserver_watch_events_sizes sample", func() bool {
		families = scrapeMetrics(ctx, t, e)
		return seriesCount(families["apiserver_watch_events_sizes"], cmLabels) >= 1 && hasVerb(families["apiserver_request_total"], "WATCH")
	})
	for name, want := range kubeMetrics {
		mf, ok := families[name]
		if !ok || len(mf.GetMetric()) == 0 {
			t.Errorf("%s: not exported", name)
			continue
		}
		for _, m := range mf.GetMetric() {
			if got := labelNames(m); !slices.Equal(got, want) {
				t.Errorf("%s: labels %v, want %v", name, got, want)
				break
			}
		}
	}
	verbs := map[string]bool{}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "verb" {
				verbs[l.GetValue()] = true
				if !slices.Contains(kubeVerbs, l.GetValue()) {
					t.Errorf("apiserver_request_total verb %q is not one kube-apiserver reports", l.GetValue())
				}
			}
		}
	}
	for _, v := range []string{"GET", "LIST", "POST", "WATCH"} {
		if !verbs[v] {
			t.Errorf("apiserver_request_total has no verb %s after such a request; verbs: %v", v, verbs)
		}
	}

	// Who may read /metrics.
	for _, tc := range []struct {
		name  string
		token string
		want  int
	}{{"no credentials (system:anonymous)", "", http.StatusForbidden}, {"user without the grant", "nobody-secret", http.StatusForbidden}} {
		cfg := rest.AnonymousClientConfig(e.config)
		cfg.BearerToken = tc.token
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var code int
		c.CoreV1().RESTClient().Get().AbsPath("/metrics").Do(ctx).StatusCode(&code)
		if code != tc.want {
			t.Errorf("/metrics, %s: %d, want %d", tc.name, code, tc.want)
		}
	}
}

// labelNames returns m's label names, sorted, without the all-in-one's
// "service".
func labelNames(m *dto.Metric) []string {
	var out []string
	for _, l := range m.GetLabel() {
		if l.GetName() != "service" {
			out = append(out, l.GetName())
		}
	}
	slices.SortFunc(out, strings.Compare)
	return out
}

// hasVerb reports whether mf has a series of verb.
func hasVerb(mf *dto.MetricFamily, verb string) bool {
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "verb" && l.GetValue() == verb {
				return true
			}
		}
	}
	return false
}

// scrapeMetrics reads the all-in-one's /metrics, as the admin, by metric
// family name.
func scrapeMetrics(ctx context.Context, t *testing.T, e *env) map[string]*dto.MetricFamily {
	t.Helper()
	body, err := e.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return families
}
