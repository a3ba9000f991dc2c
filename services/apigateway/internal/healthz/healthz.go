// Package healthz serves /healthz, /livez and /readyz with kube-apiserver's
// format: "ok" when every check passes; with ?verbose a line per check
// ("[+]name ok" / "[-]name failed: reason withheld") and a summary line;
// ?exclude=name skips a check; /readyz/name runs one check.
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
}

// Handler serves one endpoint (e.g. /readyz) with its checks.
type Handler struct {
	endpoint string
	checks   []Check
	timeout  time.Duration
}

// New returns a handler for endpoint ("/livez", "/readyz", "/healthz").
// Every endpoint has the "ping" check, which always passes.
func New(endpoint string, checks ...Check) *Handler {
	all := append([]Check{{Name: "ping", Run: func(context.Context) error { return nil }}}, checks...)
	return &Handler{endpoint: endpoint, checks: all, timeout: 5 * time.Second}
}

// ServeHTTP runs the checks.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
	defer cancel()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")

	name := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, h.endpoint), "/")
	if name != "" {
		for _, c := range h.checks {
			if c.Name == name {
				if err := c.Run(ctx); err != nil {
					http.Error(w, fmt.Sprintf("internal server error: %s check failed", name), http.StatusInternalServerError)
					return
				}
				fmt.Fprint(w, "ok")
				return
			}
		}
		http.NotFound(w, r)
		return
	}

	q := r.URL.Query()
	excluded := map[string]bool{}
	for _, e := range q["exclude"] {
		excluded[e] = true
	}
	_, verbose := q["verbose"]
	var out strings.Builder
	failed := false
	for _, c := range h.checks {
		if excluded[c.Name] {
			fmt.Fprintf(&out, "[+]%s excluded: ok\n", c.Name)
			delete(excluded, c.Name)
			continue
		}
		if err := c.Run(ctx); err != nil {
			failed = true
			fmt.Fprintf(&out, "[-]%s failed: reason withheld\n", c.Name)
			continue
		}
		fmt.Fprintf(&out, "[+]%s ok\n", c.Name)
	}
	var unknown []string
	for e := range excluded {
		unknown = append(unknown, e)
	}
	sort.Strings(unknown)
	if len(unknown) > 0 {
		fmt.Fprintf(&out, "warn: some health checks cannot be excluded: no matches for %s\n", strings.Join(quote(unknown), ","))
	}
	label := strings.TrimPrefix(h.endpoint, "/")
	if failed {
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

func quote(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}
