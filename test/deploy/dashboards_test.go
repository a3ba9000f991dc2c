package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/meridian-cp/meridian/internal/allinone"
)

// eventMetrics are metrics meridian exports only once their event has
// happened (a vector without series is not exposed), which a quiet
// all-in-one has not: each is checked to be registered under that name
// in the Go source instead.
var eventMetrics = map[string]string{
	"apiserver_flowcontrol_rejected_requests_total":                "lib/flowcontrol/apf/metrics.go",
	"apiserver_flowcontrol_current_inqueue_requests":               "lib/flowcontrol/apf/metrics.go",
	"watchfanout_terminated_watchers_total":                        "services/watchfanout/internal/cache/metrics.go",
	"meridian_admission_duration_seconds":                          "services/admission/internal/server/server.go",
	"apiserver_admission_step_admission_duration_seconds":          "services/admission/internal/admissionmetrics/admissionmetrics.go",
	"apiserver_admission_webhook_admission_duration_seconds":       "services/admission/internal/admissionmetrics/admissionmetrics.go",
	"apiserver_admission_webhook_rejection_count":                  "services/admission/internal/admissionmetrics/admissionmetrics.go",
	"apiserver_validating_admission_policy_check_total":            "services/admission/internal/admissionmetrics/admissionmetrics.go",
	"apiserver_validating_admission_policy_check_duration_seconds": "services/admission/internal/admissionmetrics/admissionmetrics.go",
	"apiserver_mutating_admission_policy_check_total":              "services/admission/internal/admissionmetrics/admissionmetrics.go",
	"apiserver_audit_event_total":                                  "services/apigateway/internal/audit/metrics.go",
	"meridian_apigateway_dependency_degraded":                      "lib/healthz/monitor.go",
}

// externalMetrics are exported by another component the chart relies
// on, not by meridian.
var externalMetrics = map[string]string{
	"certmanager_certificate_expiration_timestamp_seconds": "cert-manager, for the certificates of tls.certManager",
}

// Every query of the chart's dashboards and alerts is well formed and
// names only metrics meridian exports: those an all-in-one serves on its
// /metrics after a create, a GET, a LIST and a watch (with the label
// names the query groups and matches by), the few that appear only once
// their event happened (eventMetrics), and cert-manager's certificate
// expiry. The check is this test's own PromQL reading (the Prometheus
// parser's module would move the workspace's dependencies): brackets
// and quotes balance, and every identifier that is not a function,
// keyword or label is a metric.
func TestDashboardAndAlertQueries(t *testing.T) {
	queries := chartQueries(t)
	if len(queries) < 30 {
		t.Fatalf("%d queries found in the dashboards and alerts; want at least 30", len(queries))
	}
	exported := exportedMetrics(t)
	for name, file := range eventMetrics {
		src, err := os.ReadFile(filepath.Join(repoRoot, file))
		if err != nil || !bytes.Contains(src, []byte(`"`+name+`"`)) {
			t.Errorf("%s is not registered in %s (%v)", name, file, err)
		}
		for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
			exported[name+suffix] = nil
		}
	}
	for name := range externalMetrics {
		exported[name] = nil
	}
	for where, q := range queries {
		if err := balanced(q); err != nil {
			t.Errorf("%s: %q: %v", where, q, err)
			continue
		}
		for _, m := range metricNames(q) {
			labels, ok := exported[m]
			if !ok {
				t.Errorf("%s: %q names %s, which meridian does not export", where, q, m)
				continue
			}
			if labels == nil {
				continue
			}
			for _, l := range queryLabels(q) {
				if l != "le" && l != "instance" && !slices.Contains(labels, l) && !usedByOther(q, m, l, exported) {
					t.Errorf("%s: %q uses label %s, which %s does not have (%v)", where, q, l, m, labels)
				}
			}
		}
	}
}

// chartQueries returns every expression of the dashboards and alert
// rules, keyed by where it is.
func chartQueries(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	files, err := filepath.Glob(filepath.Join(chartDir, "dashboards", "*.json"))
	if err != nil || len(files) < 6 {
		t.Fatalf("dashboards: %v, %v (want the request path's and one per service)", files, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Title  string `json:"title"`
			Panels []struct {
				Title   string `json:"title"`
				Targets []struct {
					Expr string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
		}
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, p := range d.Panels {
			for i, tg := range p.Targets {
				out[fmt.Sprintf("%s / %s [%d]", filepath.Base(f), p.Title, i)] = tg.Expr
			}
		}
	}
	data, err := os.ReadFile(filepath.Join(chartDir, "rules", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []ruleGroup `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(data, &rules); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("alerts.yaml %s: rule %q lacks a name, a severity or a summary", g.Name, r.Alert)
			}
			out["alert "+r.Alert] = r.Expr
		}
	}
	return out
}

// exportedMetrics starts an all-in-one, makes a create, a GET, a LIST
// and a watch as a user flow control does not exempt (so that its
// metrics have series), and returns the metric families its /metrics serves, by
// name, with their label names (histograms also under _bucket, _sum and
// _count).
func exportedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte("dash-secret,dash,1001\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cp, err := allinone.Start(ctx, allinone.Config{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Logger: slog.New(slog.DiscardHandler),
		TokenAuthFile: tokens, AuthorizationMode: "AlwaysAllow"})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	rc, err := clientcmd.BuildConfigFromFlags("", cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(rc)
	uc := rest.AnonymousClientConfig(rc)
	uc.BearerToken = "dash-secret"
	cms := kubernetes.NewForConfigOrDie(uc).CoreV1().ConfigMaps("default")
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "d"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.Get(ctx, "d", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cms.List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if w, err := cms.Watch(wctx, metav1.ListOptions{}); err == nil {
		<-wctx.Done()
		w.Stop()
	}
	wcancel()
	body, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for name, mf := range families {
		var labels []string
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
			}
		}
		out[name] = labels
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			out[name+suffix] = labels
		}
	}
	return out
}

// balanced reports an error unless q's parentheses, brackets and braces
// nest and its double quotes close.
func balanced(q string) error {
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	inQuote := false
	for _, c := range q {
		switch {
		case c == '"':
			inQuote = !inQuote
		case inQuote:
		case c == '(' || c == '[' || c == '{':
			stack = append(stack, c)
		case c == ')' || c == ']' || c == '}':
			if len(stack) == 0 || stack[len(stack)-1] != pairs[c] {
				return fmt.Errorf("unbalanced %q", c)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if inQuote || len(stack) > 0 {
		return fmt.Errorf("unclosed %q or quote", string(stack))
	}
	return nil
}

var (
	quoted      = regexp.MustCompile(`"[^"]*"`)
	matchers    = regexp.MustCompile(`\{[^}]*\}`)
	ranges      = regexp.MustCompile(`\[[^\]]*\]`)
	grouping    = regexp.MustCompile(`\b(by|without)\s*\(([^)]*)\)`)
	identifier  = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	matcherName = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	// promqlWords are PromQL's functions, aggregations and keywords the
	// queries use.
	promqlWords = []string{"sum", "max", "min", "avg", "count", "rate", "increase", "irate", "histogram_quantile", "time", "by", "without", "and", "or", "unless", "on", "ignoring", "bool", "offset"}
)

// metricNames returns the metric names q selects.
func metricNames(q string) []string {
	s := quoted.ReplaceAllString(q, `""`)
	s = matchers.ReplaceAllString(s, " ")
	s = ranges.ReplaceAllString(s, " ")
	s = grouping.ReplaceAllString(s, " ")
	var out []string
	for _, id := range identifier.FindAllString(s, -1) {
		if !slices.Contains(promqlWords, id) && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// queryLabels returns the label names q groups by or matches on.
func queryLabels(q string) []string {
	var out []string
	for _, g := range grouping.FindAllStringSubmatch(q, -1) {
		for _, l := range strings.Split(g[2], ",") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
	}
	for _, m := range matchers.FindAllString(quoted.ReplaceAllString(q, `""`), -1) {
		for _, mm := range matcherName.FindAllStringSubmatch(m, -1) {
			out = append(out, mm[1])
		}
	}
	return out
}

// usedByOther reports whether label l of q belongs to another metric q
// names (a query of two metrics groups each by its own labels).
func usedByOther(q, m, l string, exported map[string][]string) bool {
	for _, o := range metricNames(q) {
		if o != m && slices.Contains(exported[o], l) {
			return true
		}
	}
	return false
}
