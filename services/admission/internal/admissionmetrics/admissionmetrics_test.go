package admissionmetrics

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Mutation errors are classified as kube-apiserver's mutating policy
// plugin classifies them, by the CEL library's messages.
func TestMutationErrorType(t *testing.T) {
	for err, want := range map[error]string{
		nil: MutationNoError,
		errors.New("compilation failed: ERROR: <input>:1:1: undeclared reference"):                                 MutationCompileError,
		errors.New("validation failed due to running out of cost budget, no further validation rules will be run"): MutationOutOfBudget,
		errors.New("JSON Patch: remove operation does not apply: doc is missing path"):                             MutationInvalidError,
	} {
		if got := MutationErrorType(err); got != want {
			t.Errorf("MutationErrorType(%v) = %q, want %q", err, got, want)
		}
	}
}

// TestPolicyCheck: a binding's PolicyCheck records the same series as
// ObservePolicyCheck, for the allow outcome it keeps and for the others,
// and a nil one records nothing.
func TestPolicyCheck(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg)
	if err != nil {
		t.Fatal(err)
	}
	c := m.PolicyCheck("p", "b")
	for range 3 {
		c.Observe("allow", PolicyNoError, time.Millisecond)
	}
	c.Observe("deny", PolicyNoError, time.Millisecond)
	c.Observe("allow", PolicyInvalidError, time.Millisecond)
	m.ObservePolicyCheck("p", "b", "allow", PolicyNoError, time.Millisecond)
	var none *PolicyCheck
	none.Observe("allow", PolicyNoError, time.Millisecond)
	for _, tc := range []struct {
		action, errorType string
		want              float64
	}{{"allow", PolicyNoError, 4}, {"deny", PolicyNoError, 1}, {"allow", PolicyInvalidError, 1}} {
		if got := testutil.ToFloat64(m.check.WithLabelValues("p", "b", tc.action, tc.errorType)); got != tc.want {
			t.Errorf("check_total{%s,%s} = %v, want %v", tc.action, tc.errorType, got, tc.want)
		}
	}
	if n := testutil.CollectAndCount(reg, "apiserver_validating_admission_policy_check_duration_seconds"); n != 3 {
		t.Errorf("%d duration series, want 3", n)
	}
}
