package celpolicy

import (
	"context"
	"reflect"
	"testing"

	"github.com/google/cel-go/common/types"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/internal/policy"
)

// TestMemoKey checks which expressions are shared between the policies of
// a request: those reading only object, oldObject, request and
// namespaceObject.
func TestMemoKey(t *testing.T) {
	for _, c := range []struct {
		expr   string
		shared bool
	}{
		{"object.metadata.name.size() < 64", true},
		{"object.data.all(k, k.size() < 256)", true},
		{"object.data.exists(k, k.size() == request.name.size())", true},
		{"[1, 2].all(i, v, v == i + 1)", true},
		{"has(oldObject.spec) && namespaceObject.metadata.name == 'x'", true},
		{"[1, 2].exists(params, params == 2)", true}, // a comprehension variable, not params
		{"{'a': object.kind}.a == 'ConfigMap'", true},
		{"'forbidden' in variables.labels", false},
		{"object.metadata.name == params.metadata.name", false},
		{"object.data.all(k, k.size() < params.data.size())", false},
		{"[0].all(x, x == variables.n)", false},
		{"authorizer.group('').resource('pods').check('get').allowed()", false},
		{"authorizer.requestResource.check('get').allowed()", false},
	} {
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			ParamKind:   &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			Variables:   []admissionregistrationv1.Variable{{Name: "labels", Expression: "object.metadata.?labels.orValue({})"}, {Name: "n", Expression: "1"}},
			Validations: []admissionregistrationv1.Validation{{Expression: c.expr}},
		}}
		vp := compileValidating(p, func(*admissionregistrationv1.ParamKind) (*paramSource, error) { return nil, nil })
		if vp.err != nil || vp.untracked == nil {
			t.Errorf("%s: not compiled untracked (%v)", c.expr, vp.err)
			continue
		}
		if got := vp.untracked.validationKeys[0] != ""; got != c.shared {
			t.Errorf("%s: shared %v, want %v", c.expr, got, c.shared)
		}
		if got := vp.untracked.varKeys; !reflect.DeepEqual(got, []string{"object.metadata.?labels.orValue({})", "1"}) {
			t.Errorf("variable keys %q", got)
		}
	}
}

// TestSharedExpressionAcrossPolicies evaluates two policies holding the
// same validation, one bound with Warn and one with Deny, and a third
// whose validation reads its variable: each policy decides on the shared
// value as on its own.
func TestSharedExpressionAcrossPolicies(t *testing.T) {
	entry := func(name, expr string, action admissionregistrationv1.ValidationAction) validatingEntry {
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			Variables:   []admissionregistrationv1.Variable{{Name: "prefix", Expression: "'" + name + "'"}},
			Validations: []admissionregistrationv1.Validation{{Expression: expr, MessageExpression: "'name ' + object.metadata.name"}},
		}}
		b := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-b"},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionregistrationv1.ValidationAction{action}}}
		return validatingEntry{policy: compileValidating(p, nil), bindings: []*admissionregistrationv1.ValidatingAdmissionPolicyBinding{b}}
	}
	const same = "object.metadata.name.startsWith('ok')"
	entries := []validatingEntry{
		entry("warn", same, admissionregistrationv1.Warn),
		entry("deny", same, admissionregistrationv1.Deny),
		entry("okp", "object.metadata.name.startsWith(variables.prefix)", admissionregistrationv1.Deny),
	}
	shared := sharedKeys(entries)
	if want := map[string]bool{same: true, "'name ' + object.metadata.name": true}; !reflect.DeepEqual(shared, want) {
		t.Fatalf("shared keys %v, want %v", shared, want)
	}
	run := func(name string) (policy.Result, *request) {
		r := &request{authz: mastersOnly, nsSet: true, shared: shared}
		var ps policies
		for _, e := range entries {
			ps = append(ps, &validatingInvocation{req: r, policy: e.policy, binding: e.bindings[0]})
		}
		req := &admissionv1.AdmitRequest{Operation: admissionv1.Operation_OPERATION_CREATE, Kind: &admissionv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Resource: &admissionv1.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespace: "default", Name: name,
			Object: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `","namespace":"default"}}`)}
		res, err := policy.Evaluator{Set: ps}.Admit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return res, r
	}

	res, r := run("bad")
	wantWarn := []string{"Validation failed for ValidatingAdmissionPolicy 'warn' with binding 'warn-b': name bad"}
	if !reflect.DeepEqual(res.Warnings, wantWarn) {
		t.Errorf("warnings %q, want %q", res.Warnings, wantWarn)
	}
	if res.Allowed || res.Denial.Code != 422 ||
		res.Denial.Message != `configmaps "bad" is forbidden: ValidatingAdmissionPolicy 'deny' with binding 'deny-b' denied request: name bad` {
		t.Errorf("denial %+v", res.Denial)
	}
	if v := r.in.memo[same]; v != types.False {
		t.Errorf("the shared validation's value was not kept: %v", v)
	}

	// okp's own validation (not shared) denies ok-1; the shared one admits.
	res, _ = run("ok-1")
	if len(res.Warnings) != 0 || res.Allowed || res.Denial.Message != `configmaps "ok-1" is forbidden: ValidatingAdmissionPolicy 'okp' with binding 'okp-b' denied request: name ok-1` {
		t.Errorf("ok-1: %+v %+v", res.Warnings, res.Denial)
	}
	res, _ = run("okp-1")
	if !res.Allowed || len(res.Warnings) != 0 {
		t.Errorf("okp-1: %+v %+v", res.Warnings, res.Denial)
	}
}
