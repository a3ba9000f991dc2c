package policy_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/internal/admissionmetrics"
	"github.com/meridian-cp/meridian/services/admission/internal/policy"
)

// A request's mutating policies are timed as its admit step and the
// others as its validate step, rejected on the step that denied; a
// request no policy matched records no step.
func TestStepMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := admissionmetrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	create := &admissionv1.AdmitRequest{Operation: admissionv1.Operation_OPERATION_CREATE}
	for _, l := range []list{
		{namedPolicy{"m", true}, namedPolicy{"v", false}},                             // admit and validate, allowed
		{namedPolicy{"m", true}, fixed{d: policy.Decision{Denial: &policy.Denial{}}}}, // validate rejected
		{namedPolicy{"v", false}},                                                     // validate only
		{},                                                                            // no step
	} {
		if _, err := (policy.Evaluator{Set: l, Metrics: m}).Admit(t.Context(), create); err != nil {
			t.Fatal(err)
		}
	}
	counts := map[string]int{}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() != "apiserver_admission_step_admission_duration_seconds" {
			continue
		}
		for _, s := range mf.GetMetric() {
			var key []string
			for _, l := range s.GetLabel() {
				key = append(key, l.GetName()+"="+l.GetValue())
			}
			counts[strings.Join(key, ",")] += int(s.GetHistogram().GetSampleCount())
		}
	}
	wantCounts := map[string]int{
		"operation=CREATE,rejected=false,type=admit":    2,
		"operation=CREATE,rejected=false,type=validate": 2,
		"operation=CREATE,rejected=true,type=validate":  1,
	}
	if len(counts) != len(wantCounts) {
		t.Errorf("step series %v, want %v", counts, wantCounts)
	}
	for k, v := range wantCounts {
		if counts[k] != v {
			t.Errorf("step %s: %d samples, want %d (all: %v)", k, counts[k], v, counts)
		}
	}
	if n := testutil.CollectAndCount(reg, "apiserver_admission_webhook_admission_duration_seconds"); n != 0 {
		t.Errorf("webhook series without a webhook: %d", n)
	}
}
