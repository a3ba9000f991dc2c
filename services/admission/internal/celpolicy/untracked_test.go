package celpolicy

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meridian-cp/meridian/lib/kube/celenv"
	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
)

// untrackedCase is one request of the untracked-path tests.
type untrackedCase struct {
	obj, old string
	ns       *corev1.Namespace
	param    runtime.Object
}

func (c untrackedCase) request() *admissionv1.AdmitRequest {
	req := &admissionv1.AdmitRequest{Operation: admissionv1.Operation_OPERATION_CREATE, Kind: &admissionv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		Resource: &admissionv1.GroupVersionResource{Version: "v1", Resource: "configmaps"}, Namespace: "default", Name: "x", Object: []byte(c.obj),
		UserInfo: &admissionv1.UserInfo{Username: "alice", Groups: []string{"system:authenticated"}}}
	if c.old != "" {
		req.Operation, req.OldObject = admissionv1.Operation_OPERATION_UPDATE, []byte(c.old)
	}
	return req
}

// runBoth evaluates vp for c with its untracked programs (when the gate
// lets it) and with the tracked programs only, and reports both results
// and whether the untracked evaluation was used.
func runBoth(t *testing.T, vp *validatingPolicy, c untrackedCase, budget int64) (got, want validateResult, used bool) {
	t.Helper()
	ctx := context.Background()
	tracked := *vp
	tracked.untracked = nil
	a := mustAttributes(t, c.request())
	in, err := newCELInput(a, c.ns, mastersOnly)
	if err != nil {
		t.Fatal(err)
	}
	if size := inputSize(in, nil, c.param); vp.untracked != nil && vp.untracked.fits(size, budget) {
		_, _, used = vp.untracked.eval(ctx, in, paramValue(c.param), vp.untracked.quick(size), vp.validations, vp.messages)
	}
	got = vp.validate(ctx, in, a, c.param, budget)
	ta := mustAttributes(t, c.request())
	tin, err := newCELInput(ta, c.ns, mastersOnly)
	if err != nil {
		t.Fatal(err)
	}
	want = tracked.validate(ctx, tin, ta, c.param, budget)
	return clean(got), clean(want), used
}

// trackedCost is the budget the tracked programs charge for the
// validations and then the message expressions (variables included).
func trackedCost(t *testing.T, vp *validatingPolicy, c untrackedCase) int64 {
	t.Helper()
	a := mustAttributes(t, c.request())
	in, err := newCELInput(a, c.ns, mastersOnly)
	if err != nil {
		t.Fatal(err)
	}
	params := paramValue(c.param)
	_, left, err := vp.validations.forInput(context.Background(), &activation{in: in, params: params, authorizer: true}, celenv.RuntimeBudget)
	if err != nil {
		t.Fatal(err)
	}
	if !vp.messages.empty {
		if _, left, err = vp.messages.forInput(context.Background(), &activation{in: in, params: params}, left); err != nil {
			t.Fatal(err)
		}
	}
	return celenv.RuntimeBudget - left
}

// TestUntrackedMatchesTracked: over a table of policies (variables,
// messageExpressions, reasons, params, request and namespace fields, the
// authorizer, optional types, runtime errors) and requests, the gated
// untracked evaluation is taken where the policy's worst case is bounded
// and gives the same decisions, messages and reasons as the tracked
// programs alone; the tracked programs never charge more than the
// worst case the gate admitted them under.
func TestUntrackedMatchesTracked(t *testing.T) {
	forbidden := metav1.StatusReasonForbidden
	policies := []struct {
		name        string
		variables   []admissionregistrationv1.Variable
		validations []admissionregistrationv1.Validation
		params      bool
	}{
		{name: "loadtest", variables: []admissionregistrationv1.Variable{{Name: "labels", Expression: "object.metadata.?labels.orValue({})"}},
			validations: []admissionregistrationv1.Validation{{Expression: "object.metadata.name.size() < 64"}, {Expression: "!('forbidden' in variables.labels)", Reason: &forbidden},
				{Expression: "object.data.all(k, k.size() < 256)", Message: "keys too long"}}},
		{name: "messages", variables: []admissionregistrationv1.Variable{{Name: "env", Expression: "object.metadata.?labels.orValue({}).?env.orValue('none')"}},
			validations: []admissionregistrationv1.Validation{
				{Expression: "object.metadata.name.startsWith('a')", MessageExpression: "'name ' + object.metadata.name + ' must start with a'"},
				{Expression: "object.data.size() < 3", MessageExpression: "'too many keys: ' + string(object.data.size())"},
				{Expression: "false", MessageExpression: "'  '", Message: "fallback message"},
				{Expression: "object.metadata.name != 'two'", MessageExpression: "'two\\nlines'"},
			}},
		{name: "request-namespace-authorizer", validations: []admissionregistrationv1.Validation{
			{Expression: "request.userInfo.username == 'alice' && request.operation in ['CREATE', 'UPDATE']"},
			{Expression: "namespaceObject == null || namespaceObject.metadata.?labels.orValue({}).?team.orValue('') != 'red'", Message: "red team"},
			{Expression: "oldObject == null || oldObject.metadata.name == object.metadata.name"},
			{Expression: "authorizer.group('').resource('configmaps').namespace(request.namespace).check('create').allowed()", Message: "not allowed"},
		}},
		{name: "params", params: true, validations: []admissionregistrationv1.Validation{
			{Expression: "params == null || object.data.size() <= int(params.data.max)", MessageExpression: "'at most ' + params.data.max + ' keys'"},
			{Expression: "params == null || !(object.metadata.name in params.data)"},
		}},
		{name: "variables", variables: []admissionregistrationv1.Variable{
			{Name: "keys", Expression: "object.data.size()"}, {Name: "more", Expression: "variables.keys + 1"},
			{Name: "number", Expression: "int(object.metadata.name)"}, {Name: "unused", Expression: "object.metadata.name + '!'"},
		}, validations: []admissionregistrationv1.Validation{
			{Expression: "variables.more > variables.keys", MessageExpression: "'keys: ' + string(variables.keys)"},
			{Expression: "variables.keys < 4 || variables.number > 0", Message: "not a number"},
			{Expression: "variables.keys < 3", MessageExpression: "string(variables.more) + ' keys'"},
		}},
		{name: "runtime-error", validations: []admissionregistrationv1.Validation{
			{Expression: "object.metadata.name == 'abc' || int(object.metadata.name) > 0", Message: "not a number"}, {Expression: "true"},
		}},
		{name: "libraries", validations: []admissionregistrationv1.Validation{
			{Expression: "object.metadata.name.matches('^[a-z]+$')"},
			{Expression: "object.metadata.?annotations.orValue({}).all(k, v, v.size() < 100)"},
			{Expression: "!has(object.data.quota) || quantity(object.data.quota).isLessThan(quantity('1Gi'))"},
			{Expression: "!has(object.data.ip) || isIP(object.data.ip)"},
			{Expression: "object.data.filter(k, k.size() > 1).size() < 2"},
		}},
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default", Labels: map[string]string{"team": "red"}}}
	param := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "limits"}, "data": map[string]any{"max": "2", "prod": "x"}}}
	objects := []string{
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"abc","namespace":"default"},"data":{"a":"1"}}`,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"prod","namespace":"default","labels":{"env":"prod","forbidden":"x"},"annotations":{"x":"y"}},"data":{"a":"1","bb":"2","quota":"2Gi","ip":"nope"}}`,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"two","namespace":"default"},"data":{"` + strings.Repeat("k", 300) + `":"v","ip":"10.0.0.1","quota":"1Mi"}}`,
	}
	for _, pc := range policies {
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: pc.name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{Variables: pc.variables, Validations: pc.validations}}
		if pc.params {
			p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
		}
		vp := compileValidating(p, func(*admissionregistrationv1.ParamKind) (*paramSource, error) { return nil, nil })
		if vp.err != nil {
			t.Fatalf("%s: %v", pc.name, vp.err)
		}
		if vp.untracked == nil {
			t.Fatalf("%s: no untracked programs; want a bounded worst case", pc.name)
		}
		used, denied := 0, 0
		for _, obj := range objects {
			for _, old := range []string{"", objects[0]} {
				for _, n := range []*corev1.Namespace{nil, ns} {
					params := []runtime.Object{nil}
					if pc.params {
						params = append(params, param)
					}
					for _, prm := range params {
						c := untrackedCase{obj: obj, old: old, ns: n, param: prm}
						got, want, u := runBoth(t, vp, c, celenv.RuntimeBudget)
						if !reflect.DeepEqual(got, want) {
							t.Errorf("%s %s: untracked %+v\ntracked %+v", pc.name, obj, got, want)
						}
						if !u {
							continue
						}
						used++
						for _, d := range want.Decisions {
							if d.Action == actionDeny {
								denied++
							}
						}
						b := 0
						for inputSize(mustCELInput(t, c), nil, prm) > sizeBounds[b] {
							b++
						}
						if cost := trackedCost(t, vp, c); uint64(cost) > vp.untracked.cost[b] {
							t.Errorf("%s: tracked cost %d over the gate's worst case %d", pc.name, cost, vp.untracked.cost[b])
						}
					}
				}
			}
		}
		if used == 0 {
			t.Errorf("%s: the untracked evaluation was never used", pc.name)
		}
		if pc.name != "runtime-error" && denied == 0 {
			t.Errorf("%s: no untracked evaluation denied", pc.name)
		}
	}
}

func mustCELInput(t *testing.T, c untrackedCase) *celInput {
	t.Helper()
	in, err := newCELInput(mustAttributes(t, c.request()), c.ns, mastersOnly)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// TestUntrackedOverBudget: a policy whose cost exceeds the per-call
// limit or the budget still fails as before: an evaluation error, which
// denies under failurePolicy Fail and admits under Ignore.
func TestUntrackedOverBudget(t *testing.T) {
	obj := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"a":"1","b":"2","c":"3","d":"4","e":"5","f":"6","g":"7","h":"8","i":"9"}}`
	for _, tc := range []struct {
		name, expr string
		budget     int64
		want       string
	}{
		{"per-call limit", "!authorizer.group('').resource('a').check('create').allowed() && !authorizer.group('').resource('b').check('create').allowed() && " +
			"!authorizer.group('').resource('c').check('create').allowed()", celenv.RuntimeBudget, "cost limit exceeded"},
		{"budget", "object.data.all(k, k.size() < 256)", 10, "running out of cost budget"},
	} {
		for _, fp := range []admissionregistrationv1.FailurePolicyType{admissionregistrationv1.Fail, admissionregistrationv1.Ignore} {
			p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "costly"},
				Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{FailurePolicy: &fp, Validations: []admissionregistrationv1.Validation{{Expression: tc.expr}}}}
			vp := compileValidating(p, nil)
			got, want, used := runBoth(t, vp, untrackedCase{obj: obj}, tc.budget)
			if used {
				t.Errorf("%s: the untracked evaluation was used", tc.name)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: %+v, tracked %+v", tc.name, got, want)
			}
			wantAction := actionDeny
			if fp == admissionregistrationv1.Ignore {
				wantAction = actionAdmit
			}
			if len(got.Decisions) != 1 || got.Decisions[0].Evaluation != evalError || got.Decisions[0].Action != wantAction ||
				!strings.Contains(got.Decisions[0].Message, tc.want) {
				t.Errorf("%s, %s: %+v; want an evaluation error %q, action %s", tc.name, fp, got.Decisions, tc.want, wantAction)
			}
		}
	}
}

// TestUntrackedSizeBound: a request whose object, or whose param, is
// over the largest size bound takes the tracked path, and decides as it
// does; one within a bound takes the untracked path.
func TestUntrackedSizeBound(t *testing.T) {
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "sized"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			ParamKind: &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			Validations: []admissionregistrationv1.Validation{
				{Expression: "object.data.all(k, object.data[k].size() < 20000)", MessageExpression: "'value too long in ' + object.metadata.name"},
				{Expression: "params == null || params.data.size() < 5"},
			}}}
	vp := compileValidating(p, func(*admissionregistrationv1.ParamKind) (*paramSource, error) { return nil, nil })
	if vp.untracked == nil {
		t.Fatal("no untracked programs")
	}
	object := func(valueSize int) string {
		return `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"big"},"data":{"a":"` + strings.Repeat("v", valueSize) + `"}}`
	}
	bigParam := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "p"}, "data": map[string]any{"x": strings.Repeat("p", int(sizeBounds[len(sizeBounds)-1]))}}}
	for _, tc := range []struct {
		name       string
		c          untrackedCase
		untracked  bool
		wantDenied bool
	}{
		{"small", untrackedCase{obj: object(100)}, true, false},
		{"within the largest bound", untrackedCase{obj: object(30000)}, true, true},
		{"object over the bound", untrackedCase{obj: object(int(sizeBounds[len(sizeBounds)-1]))}, false, true},
		{"param over the bound", untrackedCase{obj: object(100), param: bigParam}, false, false},
	} {
		got, want, used := runBoth(t, vp, tc.c, celenv.RuntimeBudget)
		if used != tc.untracked {
			t.Errorf("%s: untracked evaluation used = %v, want %v", tc.name, used, tc.untracked)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, tracked %+v", tc.name, got, want)
		}
		denied := len(got.Decisions) > 0 && got.Decisions[0].Action == actionDeny
		if denied != tc.wantDenied || (denied && got.Decisions[0].Message != "value too long in big") {
			t.Errorf("%s: decisions %+v, want denied = %v", tc.name, got.Decisions, tc.wantDenied)
		}
	}
	_ = fmt.Sprint
}
