// Package healthz serves /healthz, /livez and /readyz with kube-apiserver's
// format: "ok" when every check passes; with ?verbose a line per check
// ("[+]name ok" / "[-]name failed: reason withheld") and a summary line;
// ?exclude=name skips a check; /readyz/name runs one check. A failed
// check makes the endpoint answer 500, as kube-apiserver's do.
//
// The gateway serves these endpoints on its API; every other service
// serves them on its plaintext --metrics-listen server (Register, with
// GRPC: readiness is the service's gRPC health status), where kubelet's
// httpGet probes reach them.
//
// A check may be optional (Check.Degraded): it probes a dependency whose
// loss the service works around (a fallback serves instead) or that costs
// some requests but not the service's ability to serve. An optional check
// that fails does not fail the endpoint: it is reported as
// "[+]name ok (degraded: what is served differently)", since taking the
// replica out of rotation would not help — every replica shares the
// dependency. Monitor runs optional checks in the background, so that an
// endpoint never waits on a dependency that does not answer, and keeps
// meridian_apigateway_dependency_degraded current.
//
// The reasons of failures are withheld from the response, as
// kube-apiserver withholds them: anonymous callers may read these
// endpoints.
package healthz

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"
)

// Check is one named health check.
type Check struct {
	// Name appears in verbose output and in /<endpoint>/<name>.
	Name string
	// Run returns nil when healthy. It must honour ctx.
	Run func(ctx context.Context) error
	// Degraded, when set, makes the check optional and says what a failure
	// means for requests ("requests are served without flow control"): a
	// failure does not fail the endpoint, and shows as
	// "[+]name ok (degraded: <Degraded>)". Empty: a failure fails the
	// endpoint.
	Degraded string
}

// outcome is the result of one run of a check.
type outcome int

const (
	passed   outcome = iota
	degraded         // an optional check failed
	failed           // a required check failed
)

// run runs c and classifies its result.
func (c Check) run(ctx context.Context) outcome {
	if err := c.Run(ctx); err != nil {
		if c.Degraded != "" {
			return degraded
		}
		return failed
	}
	return passed
}

// Handler serves one endpoint (e.g. /readyz) with its checks.
type Handler struct {
	endpoint string
	checks   []Check
	timeout  time.Duration
	metrics  *Metrics
}

// New returns a handler for endpoint ("/livez", "/readyz", "/healthz")
// that records the results of its root path's checks in m (nil: nowhere).
// Every endpoint has the "ping" check, which always passes.
func New(endpoint string, m *Metrics, checks ...Check) *Handler {
	all := append([]Check{{Name: "ping", Run: func(context.Context) error { return nil }}}, checks...)
	return &Handler{endpoint: endpoint, checks: all, timeout: 5 * time.Second, metrics: m}
}

// ServeHTTP runs the checks.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
	defer cancel()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")

	name := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, h.endpoint), "/")
	if name != "" {
		h.serveOne(ctx, w, r, name)
		return
	}

	q := r.URL.Query()
	excluded := map[string]bool{}
	for _, e := range q["exclude"] {
		excluded[e] = true
	}
	_, verbose := q["verbose"]
	label := strings.TrimPrefix(h.endpoint, "/")
	var out strings.Builder
	anyFailed := false
	for _, c := range h.checks {
		if excluded[c.Name] {
			fmt.Fprintf(&out, "[+]%s excluded: ok\n", c.Name)
			delete(excluded, c.Name)
			continue
		}
		res := c.run(ctx)
		h.metrics.observe(c.Name, label, res != failed)
		switch res {
		case failed:
			anyFailed = true
			fmt.Fprintf(&out, "[-]%s failed: reason withheld\n", c.Name)
		case degraded:
			fmt.Fprintf(&out, "[+]%s ok (degraded: %s)\n", c.Name, c.Degraded)
		default:
			fmt.Fprintf(&out, "[+]%s ok\n", c.Name)
		}
	}
	var unknown []string
	for e := range excluded {
		unknown = append(unknown, e)
	}
	sort.Strings(unknown)
	if len(unknown) > 0 {
		fmt.Fprintf(&out, "warn: some health checks cannot be excluded: no matches for %s\n", strings.Join(quote(unknown), ","))
	}
	if anyFailed {
		fmt.Fprintf(&out, "%s check failed\n", label)
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, out.String())
		return
	}
	if verbose {
		fmt.Fprintf(&out, "%s check passed\n", label)
		fmt.Fprint(w, out.String())
		return
	}
	fmt.Fprint(w, "ok")
}

// serveOne serves /<endpoint>/<name>: that check alone. As kube-apiserver
// does, it records no metrics (the name comes from the request).
func (h *Handler) serveOne(ctx context.Context, w http.ResponseWriter, r *http.Request, name string) {
	for _, c := range h.checks {
		if c.Name != name {
			continue
		}
		switch c.run(ctx) {
		case failed:
			http.Error(w, fmt.Sprintf("internal server error: %s check failed", name), http.StatusInternalServerError)
		case degraded:
			fmt.Fprintf(w, "ok (degraded: %s)", c.Degraded)
		default:
			fmt.Fprint(w, "ok")
		}
		return
	}
	http.NotFound(w, r)
}

func quote(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}
