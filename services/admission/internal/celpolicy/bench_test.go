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
func BenchmarkEvaluate10(b *testing.B) { benchmarkEvaluate10(b, false) }

// BenchmarkEvaluate10Distinct is BenchmarkEvaluate10 with every
// policy's expressions different (their constants), so no policy can
// use another's values.
func BenchmarkEvaluate10Distinct(b *testing.B) { benchmarkEvaluate10(b, true) }

func benchmarkEvaluate10(b *testing.B, distinct bool) {
	var entries []validatingEntry
	for i := range 10 {
		variable, validations := loadPolicyExpressions(i, distinct)
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("p", i)}, Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{"CREATE"},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}}}},
			Variables: []admissionregistrationv1.Variable{{Name: "labels", Expression: variable}},
		}}
		for _, v := range validations {
			p.Spec.Validations = append(p.Spec.Validations, admissionregistrationv1.Validation{Expression: v})
		}
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
	shared := sharedKeys(entries)
	for b.Loop() {
		r := &request{authz: mastersOnly, nsSet: true, shared: shared}
		for _, e := range entries {
			inv := &validatingInvocation{req: r, policy: e.policy, binding: e.bindings[0]}
			d, err := inv.Evaluate(context.Background(), req)
			if err != nil || d.Denial != nil {
				b.Fatal(err, d.Denial)
			}
		}
	}
}

// loadPolicyExpressions are the variable and validations of the
// loadtest's policy i: the same for every i, or with constants of their
// own when distinct (the same cost, no expression shared).
func loadPolicyExpressions(i int, distinct bool) (variable string, validations []string) {
	if !distinct {
		return "object.metadata.?labels.orValue({})",
			[]string{"object.metadata.name.size() < 64", "!('forbidden' in variables.labels)", "object.data.all(k, k.size() < 256)"}
	}
	return "object.metadata.?labels.orValue({})" + strings.Repeat(" ", i),
		[]string{fmt.Sprintf("object.metadata.name.size() < %d", 64+i), fmt.Sprintf("!('forbidden-%d' in variables.labels)", i), fmt.Sprintf("object.data.all(k, k.size() < %d)", 256+i)}
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
