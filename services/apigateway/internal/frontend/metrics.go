package frontend

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/telemetry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/requestinfo"
	"github.com/prometheus/client_golang/prometheus"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
)

// metrics are the request metrics, under kube-apiserver's names and with
// its label values, every one of them bounded whatever a client sends.
//
// apiserver_request_total counts the requests that reach an endpoint the
// server serves (a route): a served resource, a health check's root, the
// aggregated discovery documents, the OpenAPI v3 documents — what
// kube-apiserver instruments. Its resource labels come from the registry,
// never from the path as sent. A request that reaches no route (it failed
// authentication, is refused impersonation, or names a path or resource
// that is not served) is not counted there, as kube-apiserver's filters
// and NotFound handler do not count it; failed authentication is counted
// under authentication_attempts instead (authn.Metrics).
//
// apiserver_request_duration_seconds and apiserver_response_sizes (GET
// and LIST only, as kube-apiserver) observe the same requests;
// apiserver_request_duration_seconds leaves out WATCH, whose duration is
// the watch's whole life (apiserver_longrunning_requests counts the
// watches open). apiserver_current_inflight_requests is the number of
// requests being served now by request_kind (readOnly: GET and LIST;
// mutating: the rest), watches left out as kube-apiserver leaves out
// long-running requests.
type metrics struct {
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	sizes       *prometheus.HistogramVec
	longRunning *prometheus.GaugeVec
	inflight    *prometheus.GaugeVec
}

// routeLabels are the labels of apiserver_request_duration_seconds;
// apiserver_request_total adds code; apiserver_response_sizes and
// apiserver_longrunning_requests have them without dry_run (sizeLabels),
// as kube-apiserver's.
var (
	routeLabels = []string{"verb", "dry_run", "group", "version", "resource", "subresource", "scope", "component"}
	sizeLabels  = []string{"verb", "group", "version", "resource", "subresource", "scope", "component"}
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "apiserver_request_total",
			Help: "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.",
		}, append(slices.Clone(routeLabels), "code")),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "apiserver_request_duration_seconds",
			Help: "Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component.",
			// kube-apiserver's buckets.
			Buckets: []float64{0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60},
		}, routeLabels),
		sizes: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "apiserver_response_sizes",
			Help:    "Response size distribution in bytes for each group, version, verb, resource, subresource, scope and component.",
			Buckets: prometheus.ExponentialBuckets(1000, 10, 7),
		}, sizeLabels),
		longRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "apiserver_longrunning_requests",
			Help: "Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component. Not all requests are tracked this way.",
		}, sizeLabels),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "apiserver_current_inflight_requests",
			Help: "Number of requests currently being served by this apiserver, per request kind (readOnly, mutating); long-running requests are not counted.",
		}, []string{"request_kind"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.requests, err = telemetry.Register(reg, m.requests); err != nil {
		return nil, err
	}
	if m.duration, err = telemetry.Register(reg, m.duration); err != nil {
		return nil, err
	}
	if m.sizes, err = telemetry.Register(reg, m.sizes); err != nil {
		return nil, err
	}
	if m.longRunning, err = telemetry.Register(reg, m.longRunning); err != nil {
		return nil, err
	}
	if m.inflight, err = telemetry.Register(reg, m.inflight); err != nil {
		return nil, err
	}
	return m, nil
}

// begin counts a request of verb in flight until the returned func is
// called; a watch is not counted (it is long-running).
func (m *metrics) begin(verb string) func() {
	if verb == "WATCH" {
		return func() {}
	}
	kind := "mutating"
	if verb == "GET" || verb == "LIST" {
		kind = "readOnly"
	}
	g := m.inflight.WithLabelValues(kind)
	g.Inc()
	return g.Dec
}

// watching counts a watch that reached rt as long-running until the
// returned func is called.
func (m *metrics) watching(l requestLabels, rt route) func() {
	g := m.longRunning.WithLabelValues(l.verb, rt.group, rt.version, rt.resource, rt.subresource, rt.scope, rt.component)
	g.Inc()
	return g.Dec
}

// route is the endpoint a request reached, as apiserver_request_total
// labels it; the zero route (set false) is none.
type route struct {
	set                                          bool
	group, version, resource, subresource, scope string
	component                                    string
}

// resourceRoute is the route of a request for a served resource; group,
// version and resource are the registry's.
func resourceRoute(info requestinfo.Info) route {
	return route{set: true, group: info.APIGroup, version: info.APIVersion, resource: info.Resource,
		subresource: info.Subresource, scope: scope(info), component: "apiserver"}
}

// pathRoute is the route of a non-resource endpoint, labelled by a fixed
// name (kube-apiserver puts it in the subresource label); component is
// "apiserver" or, for health checks, empty, as there.
func pathRoute(name, component string) route {
	return route{set: true, subresource: name, component: component}
}

// requestLabels are the labels of a request that serving changes the
// request's own fields for (rewrite replaces its query and drops its
// Content-Type): taken before it is served.
type requestLabels struct {
	verb, dryRun string
}

// labels reads a request's verb and dry_run labels as kube-apiserver's
// cleanVerb and cleanDryRun do: the HTTP method, LIST for a GET of a
// collection, WATCH, APPLY for a server-side apply, "other" for any other
// method; the sorted distinct dryRun values, or "invalid".
func labels(r *http.Request, info *requestinfo.Info) requestLabels {
	verb := strings.ToUpper(r.Method)
	switch {
	case info.Verb == "watch":
		verb = "WATCH"
	case verb == http.MethodGet || verb == http.MethodHead:
		verb = "GET"
		if s := scope(*info); s != "resource" && s != "" {
			verb = "LIST"
		}
	case verb == http.MethodPatch:
		if ct, _ := negotiation.ContentType(r.Header.Get("Content-Type")); ct == negotiation.ApplyPatchYAML || ct == negotiation.ApplyPatchCBOR {
			verb = "APPLY"
		}
	}
	if !validVerbs[verb] {
		verb = "other"
	}
	return requestLabels{verb: verb, dryRun: dryRunLabel(r.URL)}
}

// validVerbs are kube-apiserver's reported verbs; any other is "other".
var validVerbs = map[string]bool{
	"APPLY": true, "CONNECT": true, "CREATE": true, "DELETE": true, "DELETECOLLECTION": true, "GET": true, "LIST": true,
	"PATCH": true, "POST": true, "PROXY": true, "PUT": true, "UPDATE": true, "WATCH": true, "WATCHLIST": true,
}

// dryRunLabel is the dry_run label of a request's query.
func dryRunLabel(u *url.URL) string {
	if !strings.Contains(u.RawQuery, "dryRun") {
		return ""
	}
	values := u.Query()["dryRun"]
	if len(metav1validation.ValidateDryRun(nil, values)) > 0 {
		return "invalid"
	}
	values = slices.Clone(values)
	slices.Sort(values)
	return strings.Join(slices.Compact(values), ",")
}

// scope is kube-apiserver's scope label: resource (one object, or a
// create), namespace, cluster, or empty for non-resource requests.
func scope(info requestinfo.Info) string {
	switch {
	case !info.IsResourceRequest:
		return ""
	case info.Name != "" || info.Verb == "create":
		return "resource"
	case info.Namespace != "":
		return "namespace"
	default:
		return "cluster"
	}
}

// observe counts a request that reached rt and was answered with code
// after took, with a response body of size bytes.
func (m *metrics) observe(l requestLabels, rt route, code int, took time.Duration, size int64) {
	if !rt.set {
		return
	}
	m.requests.WithLabelValues(l.verb, l.dryRun, rt.group, rt.version, rt.resource, rt.subresource, rt.scope, rt.component, strconv.Itoa(code)).Inc()
	if l.verb != "WATCH" {
		m.duration.WithLabelValues(l.verb, l.dryRun, rt.group, rt.version, rt.resource, rt.subresource, rt.scope, rt.component).Observe(took.Seconds())
	}
	if l.verb == "GET" || l.verb == "LIST" {
		m.sizes.WithLabelValues(l.verb, rt.group, rt.version, rt.resource, rt.subresource, rt.scope, rt.component).Observe(float64(size))
	}
}
