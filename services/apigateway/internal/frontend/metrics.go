package frontend

import (
	"strconv"

	"github.com/meridian-cp/meridian/lib/telemetry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/requestinfo"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the request metrics, under kube-apiserver's names.
type metrics struct {
	requests *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "apiserver_request_total",
		Help: "Counter of apiserver requests broken out for each verb, group, version, resource, scope, component, and HTTP response code.",
	}, []string{"verb", "group", "version", "resource", "subresource", "scope", "component", "code"})}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.requests, err = telemetry.Register(reg, m.requests); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) observe(info requestinfo.Info, code int) {
	verb := info.Verb
	scope := ""
	if info.IsResourceRequest {
		switch {
		case info.Name != "":
			scope = "resource"
		case info.Namespace != "":
			scope = "namespace"
		default:
			scope = "cluster"
		}
	} else {
		verb = "get"
	}
	m.requests.WithLabelValues(verb, info.APIGroup, info.APIVersion, info.Resource, info.Subresource, scope, "apiserver", strconv.Itoa(code)).Inc()
}
