package celpolicy

import (
	"reflect"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/internal/admissionmetrics"
)

// TestMatchingCached asks a policy set which bindings match a sequence of
// requests of the same kinds, so that later requests are answered from
// the match cache: resourceNames, subresources, operations, exclude
// rules and selectors decide as for the first request of each kind.
func TestMatchingCached(t *testing.T) {
	rule := func(resources ...string) []admissionregistrationv1.NamedRuleWithOperations {
		return []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: resources},
		}}}
	}
	entry := func(name string, constraints *admissionregistrationv1.MatchResources, bindings ...*admissionregistrationv1.MatchResources) validatingEntry {
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: constraints, Validations: []admissionregistrationv1.Validation{{Expression: "true"}},
		}}
		e := validatingEntry{policy: compileValidating(p, nil)}
		for i, mr := range bindings {
			m, err := newMatcher(mr)
			if err != nil {
				t.Fatal(err)
			}
			e.bindings = append(e.bindings, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-" + string(rune('a'+i))},
				Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, MatchResources: mr, ValidationActions: []admissionregistrationv1.ValidationAction{"Deny"}}})
			e.matchers = append(e.matchers, m)
			e.checks = append(e.checks, (*admissionmetrics.Metrics)(nil).PolicyCheck(name, e.bindings[i].Name))
		}
		return e
	}
	named := rule("configmaps")
	named[0].ResourceNames = []string{"x"}
	st := &state{validating: []validatingEntry{
		entry("all-cm", &admissionregistrationv1.MatchResources{ResourceRules: rule("configmaps")}, nil,
			&admissionregistrationv1.MatchResources{ResourceRules: named},
			&admissionregistrationv1.MatchResources{ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}},
			&admissionregistrationv1.MatchResources{ExcludeResourceRules: named}),
		entry("status", &admissionregistrationv1.MatchResources{ResourceRules: rule("configmaps/status")}, nil),
		entry("secrets", &admissionregistrationv1.MatchResources{ResourceRules: rule("secrets")}, nil),
	}, changed: make(chan struct{})}
	st.matches.byName = st.namesRules()
	if !st.matches.byName {
		t.Fatal("a rule names resources: the name must be part of the key")
	}
	s := &Set{authz: mastersOnly}
	s.state.Store(st)

	req := func(op admissionv1.Operation, resource, sub, name, env string) *admissionv1.AdmitRequest {
		kind := "ConfigMap"
		if resource == "secrets" {
			kind = "Secret"
		}
		return &admissionv1.AdmitRequest{Operation: op, Kind: &admissionv1.GroupVersionKind{Version: "v1", Kind: kind},
			Resource: &admissionv1.GroupVersionResource{Version: "v1", Resource: resource}, SubResource: sub, Name: name,
			Object: []byte(`{"apiVersion":"v1","kind":"` + kind + `","metadata":{"name":"` + name + `","labels":{"env":"` + env + `"}}}`)}
	}
	create, update := admissionv1.Operation_OPERATION_CREATE, admissionv1.Operation_OPERATION_UPDATE
	cases := []struct {
		req  *admissionv1.AdmitRequest
		want []string
	}{
		{req(create, "configmaps", "", "x", "prod"), []string{"all-cm-a", "all-cm-b", "all-cm-c"}},
		{req(create, "configmaps", "", "y", "prod"), []string{"all-cm-a", "all-cm-c", "all-cm-d"}},
		{req(create, "configmaps", "", "y", "dev"), []string{"all-cm-a", "all-cm-d"}},
		{req(create, "configmaps", "", "x", "dev"), []string{"all-cm-a", "all-cm-b"}},
		{req(create, "configmaps", "status", "y", "dev"), []string{"status-a"}},
		{req(update, "configmaps", "", "y", "prod"), nil},
		{req(create, "secrets", "", "y", "prod"), []string{"secrets-a"}},
		{req(create, "pods", "", "y", "prod"), nil},
	}
	for round := range 2 { // the second round from the cache
		for _, c := range cases {
			var got []string
			for _, p := range s.Matching(c.req) {
				got = append(got, p.(*validatingInvocation).binding.Name)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("round %d, %s %s/%s %s: matched %q, want %q", round, c.req.Operation, c.req.Resource.Resource, c.req.SubResource,
					c.req.Object, got, c.want)
			}
		}
	}
	if n := st.matches.n.Load(); n != 6 {
		t.Errorf("%d kinds of request cached, want 6", n)
	}
	exempt := req(create, "validatingadmissionpolicies", "", "x", "prod")
	exempt.Kind = &admissionv1.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicy"}
	exempt.Resource.Group = "admissionregistration.k8s.io"
	if got := s.Matching(exempt); got != nil {
		t.Errorf("an admission configuration kind matched %d policies", len(got))
	}
}
