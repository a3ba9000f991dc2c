package healthz

import "net/http"

// Register serves /livez, /readyz and /healthz (and /<endpoint>/<check>)
// on mux, recording the results in m (nil: nowhere): /livez runs livez,
// /readyz and /healthz run readyz, as kube components serve /healthz with
// the checks of /readyz. Every endpoint has the "ping" check besides.
func Register(mux *http.ServeMux, m *Metrics, livez, readyz []Check) {
	for endpoint, checks := range map[string][]Check{"/livez": livez, "/readyz": readyz, "/healthz": readyz} {
		h := New(endpoint, m, checks...)
		mux.Handle(endpoint, h)
		mux.Handle(endpoint+"/", h)
	}
}
