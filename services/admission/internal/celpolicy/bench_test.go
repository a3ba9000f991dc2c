package celpolicy

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
)

// BenchmarkEvaluate10 evaluates 10 policies of 3 validations and one
// variable, bound with Deny, on a 1 KiB ConfigMap create: the in-process
// part of the loadtest's 10-policy row (no gRPC, no matching).
func BenchmarkEvaluate10(b *testing.B) {
	var entries []validatingEntry
	for i := range 10 {
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("p", i)}, Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{"CREATE"},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}}}},
			Variables:   []admissionregistrationv1.Variable{{Name: "labels", Expression: "object.metadata.?labels.orValue({})"}},
			Validations: []admissionregistrationv1.Validation{{Expression: "object.metadata.name.size() < 64"}, {Expression: "!('forbidden' in variables.labels)"}, {Expression: "object.data.all(k, k.size() < 256)"}},
		}}
		vp := compileValidating(p, nil)
		m, _ := newMatcher(nil)
		entries = append(entries, validatingEntry{policy: vp, bindings: []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: p.Name, ValidationActions: []admissionregistrationv1.ValidationAction{"Deny"}}}}, matchers: []*matcher{m}})
	}
	var sb strings.Builder
	sb.WriteString(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"load","namespace":"default","labels":{"app":"load"}},"data":{`)
	for i := range 9 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `"key-%d":"%s"`, i, strings.Repeat("v", 90))
	}
	sb.WriteString("}}")
	req := &admissionv1.AdmitRequest{Operation: admissionv1.Operation_OPERATION_CREATE, Kind: &admissionv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		Resource: &admissionv1.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespace: "default", Name: "load", Object: []byte(sb.String())}
	b.ReportAllocs()
	cpu0, _ := processCPU()
	defer func() {
		// The process's CPU (GC included) per evaluation of the 10
		// policies: the loadtest's measure, without gRPC.
		cpu1, _ := processCPU()
		b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	}()
	for b.Loop() {
		r := &request{authz: mastersOnly, nsSet: true}
		for _, e := range entries {
			inv := &validatingInvocation{req: r, policy: e.policy, binding: e.bindings[0]}
			d, err := inv.Evaluate(context.Background(), req)
			if err != nil || d.Denial != nil {
				b.Fatal(err, d.Denial)
			}
		}
	}
}

// processCPU is the CPU time this process has used (utime+stime), to the
// microsecond (getrusage; /proc counts in 10 ms ticks).
func processCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
