package telemetrytest_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-cp/meridian/lib/telemetry/telemetrytest"
)

func TestSum(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "calls_total"}, []string{"method", "code"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "open"})
	reg.MustRegister(c, g)
	c.WithLabelValues("Get", "OK").Add(3)
	c.WithLabelValues("Get", "NotFound").Add(2)
	c.WithLabelValues("Put", "OK").Add(5)
	g.Set(7)
	for _, tc := range []struct {
		name  string
		match map[string]string
		want  float64
	}{
		{"calls_total", nil, 10},
		{"calls_total", map[string]string{"method": "Get"}, 5},
		{"calls_total", map[string]string{"method": "Get", "code": "OK"}, 3},
		{"calls_total", map[string]string{"method": "Delete"}, 0},
		{"calls_total", map[string]string{"absent": ""}, 0},
		{"open", nil, 7},
		{"missing", nil, 0},
	} {
		if got := telemetrytest.Sum(t, reg, tc.name, tc.match); got != tc.want {
			t.Errorf("Sum(%s, %v) = %v, want %v", tc.name, tc.match, got, tc.want)
		}
	}
}
