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
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/meridian-cp/meridian/lib/kube/celenv"
	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
)

// referenceValidator is the policy compiled into kube-apiserver's own
// validating.Validator, as the plugin builds it: what validate must
// agree with.
func referenceValidator(t *testing.T, p *admissionregistrationv1.ValidatingAdmissionPolicy) validating.Validator {
	t.Helper()
	cc, err := compileCommon(p.Name, p.Spec.MatchConstraints, p.Spec.ParamKind, p.Spec.Variables, p.Spec.MatchConditions, p.Spec.FailurePolicy,
		func(*admissionregistrationv1.ParamKind) (*paramSource, error) { return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	validations, messages, annotations := referenceAccessors(p)
	msgOpts := cc.opts
	msgOpts.HasAuthorizer = false
	return validating.NewValidator(
		cc.compiler.CompileCondition(validations, cc.opts, environment.StoredExpressions),
		cc.conditions,
		cc.compiler.CompileCondition(annotations, cc.opts, environment.StoredExpressions),
		cc.compiler.CompileCondition(messages, msgOpts, environment.StoredExpressions),
		p.Spec.FailurePolicy, nil)
}

// referenceAccessors are p's validations, message expressions and audit
// annotations as validatingAccessors has them, in the types of
// kube-apiserver's plugin, whose validator reads them back by type.
func referenceAccessors(p *admissionregistrationv1.ValidatingAdmissionPolicy) (validations, messages, annotations []plugincel.ExpressionAccessor) {
	validations, messages, annotations = validatingAccessors(p)
	for i, v := range validations {
		c := v.(*validationCondition)
		validations[i] = &validating.ValidationCondition{Expression: c.Expression, Message: c.Message, Reason: c.Reason}
	}
	for i, m := range messages {
		if m != nil {
			messages[i] = &validating.MessageExpressionCondition{MessageExpression: m.GetExpression()}
		}
	}
	for i, a := range annotations {
		c := a.(*auditAnnotationCondition)
		annotations[i] = &validating.AuditAnnotationCondition{Key: c.Key, ValueExpression: c.ValueExpression}
	}
	return validations, messages, annotations
}

// fromReference is the reference validator's result in validate's types,
// without timings.
func fromReference(r validating.ValidateResult) validateResult {
	var out validateResult
	for _, d := range r.Decisions {
		out.Decisions = append(out.Decisions, policyDecision{Action: decisionAction(d.Action), Evaluation: decisionEvaluation(d.Evaluation), Message: d.Message, Reason: d.Reason})
	}
	for _, a := range r.AuditAnnotations {
		out.AuditAnnotations = append(out.AuditAnnotations, policyAuditAnnotation{Key: a.Key, Value: a.Value, Action: auditAnnotationAction(a.Action), Error: a.Error})
	}
	return out
}

// TestValidateMatchesReference: for varied policies (variables,
// messages and messageExpressions, reasons, runtime errors, params, the
// authorizer, namespaceObject, audit annotations, match conditions, both
// failure policies, and budgets from exhausted to ample), requests and
// params, validate decides exactly as kube-apiserver's validator: the
// same actions, evaluations, messages, reasons and audit annotations.
func TestValidateMatchesReference(t *testing.T) {
	fail, ignore := admissionregistrationv1.Fail, admissionregistrationv1.Ignore
	forbidden := metav1.StatusReasonForbidden
	type spec struct {
		variables   []admissionregistrationv1.Variable
		validations []admissionregistrationv1.Validation
		annotations []admissionregistrationv1.AuditAnnotation
		conditions  []admissionregistrationv1.MatchCondition
		params      bool
	}
	specs := map[string]spec{
		"plain": {validations: []admissionregistrationv1.Validation{
			{Expression: "object.metadata.name.size() < 8"},
			{Expression: "object.data.all(k, k.size() < 6)", Message: "  short keys only  "},
			{Expression: "!('forbidden' in object.metadata.?labels.orValue({}))", Reason: &forbidden},
		}},
		"variables": {
			variables: []admissionregistrationv1.Variable{
				{Name: "labels", Expression: "object.metadata.?labels.orValue({})"},
				{Name: "env", Expression: "variables.labels.?env.orValue('none')"},
				{Name: "broken", Expression: "object.metadata.nope == 'x'"},
			},
			validations: []admissionregistrationv1.Validation{
				{Expression: "variables.env != 'prod' || 'owner' in variables.labels", MessageExpression: "'env ' + variables.env + ' needs an owner'"},
				{Expression: "variables.labels.size() < 3"},
			},
		},
		"variable-error": {
			variables:   []admissionregistrationv1.Variable{{Name: "broken", Expression: "object.metadata.nope == 'x'"}},
			validations: []admissionregistrationv1.Validation{{Expression: "variables.broken"}, {Expression: "true"}},
		},
		"message-expressions": {validations: []admissionregistrationv1.Validation{
			{Expression: "false", MessageExpression: "'denied ' + request.operation + ' of ' + request.resource.resource + ' by ' + request.userInfo.username"},
			{Expression: "false", MessageExpression: "'  '", Message: "fallback"},
			{Expression: "false", MessageExpression: "'two\\nlines'"},
			{Expression: "false", MessageExpression: "object.metadata.nope"},
			{Expression: "false", MessageExpression: "string(object.data.size())"},
		}},
		"runtime-error": {validations: []admissionregistrationv1.Validation{
			{Expression: "object.spec.replicas > 1"},
			{Expression: "int(object.metadata.name) > 0", Message: "not a number"},
			{Expression: "true"},
		}},
		"request-and-namespace": {validations: []admissionregistrationv1.Validation{
			{Expression: "namespaceObject == null || namespaceObject.metadata.name == request.namespace"},
			{Expression: "namespaceObject == null || !has(namespaceObject.metadata.managedFields)"},
			{Expression: "oldObject == null || oldObject.metadata.name == object.metadata.name"},
			{Expression: "request.dryRun == false && request.kind.kind == 'ConfigMap' && request.requestKind.kind == 'ConfigMap'"},
			{Expression: "namespaceObject == null || namespaceObject.metadata.?labels.orValue({}).?team.orValue('') != 'red'", MessageExpression: "'team ' + namespaceObject.metadata.labels.team"},
		}},
		"authorizer": {validations: []admissionregistrationv1.Validation{
			{Expression: "authorizer.group('').resource('configmaps').namespace(request.namespace).check('create').allowed()", Message: "not allowed"},
			{Expression: "authorizer.requestResource.check('update').allowed()"},
		}},
		"params": {params: true, validations: []admissionregistrationv1.Validation{
			{Expression: "params == null || object.data.size() <= int(params.data.max)", MessageExpression: "'at most ' + params.data.max + ' keys'"},
			{Expression: "params == null || !(object.metadata.name in params.data)"},
		}},
		"audit-annotations": {
			// dyn() reads past the declared namespace type, so these see
			// whether namespaceObject is the trimmed copy (validations,
			// messages) or the namespace as stored (audit annotations),
			// through a variable as well.
			variables: []admissionregistrationv1.Variable{{Name: "nsFields", Expression: "namespaceObject == null ? -1 : dyn(namespaceObject.metadata).?managedFields.orValue([]).size()"}},
			validations: []admissionregistrationv1.Validation{
				{Expression: "true"},
				{Expression: "variables.nsFields < 1", MessageExpression: "'fields ' + string(dyn(namespaceObject.metadata).?managedFields.orValue([]).size())"},
			},
			annotations: []admissionregistrationv1.AuditAnnotation{
				{Key: "nsdyn", ValueExpression: "namespaceObject == null ? 'none' : string(dyn(namespaceObject.metadata).?managedFields.orValue([]).size())"},
				{Key: "nsvar", ValueExpression: "string(variables.nsFields)"},
				{Key: "name", ValueExpression: "' ' + object.metadata.name + ' '"},
				{Key: "empty", ValueExpression: "'   '"},
				{Key: "null", ValueExpression: "null"},
				{Key: "ns", ValueExpression: "namespaceObject == null ? 'none' : string(namespaceObject.metadata.?managedFields.orValue([]).size())"},
				{Key: "error", ValueExpression: "object.metadata.nope"},
				{Key: "wrongtype", ValueExpression: "object.data.size() > 0 ? 'x' : null"},
			},
		},
		"match-conditions": {
			conditions: []admissionregistrationv1.MatchCondition{
				{Name: "named", Expression: "object.metadata.name != 'skip'"},
				{Name: "error", Expression: "object.metadata.name == 'oops' ? object.metadata.nope == 1 : true"},
			},
			validations: []admissionregistrationv1.Validation{{Expression: "object.data.size() < 2"}},
		},
		"costly-message": {validations: []admissionregistrationv1.Validation{
			{Expression: "true", MessageExpression: "string([1, 2, 3, 4, 5].map(i, [1, 2, 3, 4].map(j, i * j)).size())"},
			{Expression: "object.metadata.name == 'ok'", MessageExpression: "'name ' + object.metadata.name"},
		}},
		"expensive": {validations: []admissionregistrationv1.Validation{
			{Expression: "object.data.all(k, object.data.all(j, k.size() + j.size() < 64))", MessageExpression: "string(object.data.map(k, k).size())"},
			{Expression: "[1, 2, 3, 4].all(i, [1, 2, 3, 4].all(j, i * j > 0))", MessageExpression: "'costly ' + [1, 2, 3].map(i, string(i)).join('-')"},
			{Expression: "false", MessageExpression: "'values ' + string(object.data.map(k, object.data[k]).size())"},
		}},
	}
	objects := map[string]string{
		"small":    `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ok","namespace":"default"},"data":{"a":"1"}}`,
		"labelled": `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"prod","namespace":"team","labels":{"env":"prod","forbidden":"x","c":"d"}},"data":{"a":"1","bb":"2","longkey":"3"}}`,
		"long":     `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a-long-name","namespace":"default"},"data":{"abc":"x","abcdefgh":"y"}}`,
		"skip":     `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"skip","namespace":"default"}}`,
		"oops":     `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"oops","namespace":"default"}}`,
	}
	namespaces := map[string]*corev1.Namespace{
		"none": nil,
		"default": {ObjectMeta: metav1.ObjectMeta{Name: "default", Labels: map[string]string{"team": "red"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}}},
	}
	users := map[string]*admissionv1.UserInfo{
		"alice":  {Username: "alice", Groups: []string{"system:authenticated"}},
		"master": {Username: "root", Groups: []string{"system:masters"}},
	}
	param := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "limits"}, "data": map[string]any{"max": "2", "prod": "x"}}}
	budgets := []int64{1, 12, 200, celenv.RuntimeBudget}
	ctx := context.Background()
	cases := 0
	seen := map[string]int{} // what the reference decided, to show the cases cover it
	for specName, sp := range specs {
		for _, fp := range []*admissionregistrationv1.FailurePolicyType{&fail, &ignore} {
			p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: specName},
				Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{FailurePolicy: fp, Variables: sp.variables,
					Validations: sp.validations, AuditAnnotations: sp.annotations, MatchConditions: sp.conditions}}
			if sp.params {
				p.Spec.ParamKind = &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"}
			}
			vp := compileValidating(p, func(*admissionregistrationv1.ParamKind) (*paramSource, error) { return nil, nil })
			if vp.err != nil {
				t.Fatalf("%s: %v", specName, vp.err)
			}
			ref := referenceValidator(t, p)
			params := []runtime.Object{nil}
			if sp.params {
				params = append(params, param)
			}
			for objName, obj := range objects {
				for _, op := range []admissionv1.Operation{admissionv1.Operation_OPERATION_CREATE, admissionv1.Operation_OPERATION_UPDATE} {
					for nsName, ns := range namespaces {
						if nsName != "default" && specName != "request-and-namespace" && specName != "audit-annotations" {
							continue // the namespace matters to these only
						}
						for userName, user := range users {
							if userName != "alice" && specName != "authorizer" && specName != "message-expressions" {
								continue // the user matters to these only
							}
							req := &admissionv1.AdmitRequest{Operation: op, Kind: &admissionv1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
								Resource:  &admissionv1.GroupVersionResource{Version: "v1", Resource: "configmaps"},
								Namespace: "default", Name: objName, Object: []byte(obj), UserInfo: user}
							if op == admissionv1.Operation_OPERATION_UPDATE {
								req.OldObject = []byte(objects["small"])
							}
							for _, param := range params {
								for _, budget := range budgets {
									name := fmt.Sprintf("%s/%s/%s/%s/ns=%s/%s/param=%v/budget=%d", specName, *fp, objName, op, nsName, userName, param != nil, budget)
									// Fresh attributes for each path: the reference
									// path caches the objects' CEL values in them.
									ra := mustAttributes(t, req)
									want := fromReference(ref.Validate(ctx, ra.GetResource(), ra.versioned, param, ns, budget, mastersOnly))
									a := mustAttributes(t, req)
									in, err := newCELInput(a, ns, mastersOnly)
									if err != nil {
										t.Fatal(err)
									}
									got := vp.validate(ctx, in, a, param, budget)
									if !reflect.DeepEqual(clean(got), clean(want)) {
										t.Errorf("%s:\n got %+v\nwant %+v", name, clean(got), clean(want))
									}
									cases++
									for _, d := range want.Decisions {
										switch {
										case strings.HasPrefix(d.Message, "failed messageExpression"):
											seen["messageExpression out of budget"]++
										case strings.Contains(d.Message, "running out of cost budget"):
											seen["out of budget"]++
										case d.Evaluation == evalError:
											seen["evaluation error"]++
										case d.Evaluation == evalDeny:
											seen["deny"]++
										}
									}
									for _, a := range want.AuditAnnotations {
										seen["annotation "+string(a.Action)]++
									}
									if len(want.Decisions) == 0 {
										seen["no match"]++
									}
								}
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d cases compared: %v", cases, seen)
	for _, k := range []string{"out of budget", "messageExpression out of budget", "evaluation error", "deny", "no match",
		"annotation " + string(auditAnnotationPublish), "annotation " + string(auditAnnotationError),
		"annotation " + string(auditAnnotationExclude)} {
		if seen[k] == 0 {
			t.Errorf("no case where the reference decided %q", k)
		}
	}
}

func mustAttributes(t *testing.T, req *admissionv1.AdmitRequest) *attributes {
	t.Helper()
	a, err := newAttributes(req)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// clean is r with no decisions and no audit annotations as nil.
func clean(r validateResult) validateResult {
	out := validateResult{}
	out.Decisions = append(out.Decisions, r.Decisions...)
	out.AuditAnnotations = append(out.AuditAnnotations, r.AuditAnnotations...)
	return out
}

// TestIntegersAreCELInts: an integer in the request's object is a CEL
// int, as kube-apiserver's unstructured objects have it, so integer
// arithmetic works (`%` has no double overload) and a fraction stays a
// double.
func TestIntegersAreCELInts(t *testing.T) {
	fail := admissionregistrationv1.Fail
	p := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "ints"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{FailurePolicy: &fail, Validations: []admissionregistrationv1.Validation{
			{Expression: "object.spec.replicas % 2 == 1", Message: "odd replicas only"},
			{Expression: "type(object.spec.replicas) == int && object.spec.replicas + 1 > 1"},
			{Expression: "type(object.spec.ratio) == double"},
		}}}
	vp := compileValidating(p, func(*admissionregistrationv1.ParamKind) (*paramSource, error) { return nil, nil })
	if vp.err != nil {
		t.Fatal(vp.err)
	}
	for obj, allowed := range map[string]bool{
		`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x"},"spec":{"replicas":3,"ratio":0.5}}`: true,
		`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"x"},"spec":{"replicas":2,"ratio":0.5}}`: false,
	} {
		req := &admissionv1.AdmitRequest{Operation: admissionv1.Operation_OPERATION_CREATE, Kind: &admissionv1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			Resource:  &admissionv1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"},
			Namespace: "default", Name: "x", Object: []byte(obj), UserInfo: &admissionv1.UserInfo{Username: "alice"}}
		a := mustAttributes(t, req)
		in, err := newCELInput(a, nil, mastersOnly)
		if err != nil {
			t.Fatal(err)
		}
		res := vp.validate(context.Background(), in, a, nil, celenv.RuntimeBudget)
		var denials []string
		for _, d := range res.Decisions {
			if d.Action == actionDeny {
				denials = append(denials, fmt.Sprintf("%s (%s)", d.Message, d.Evaluation))
			}
		}
		if allowed && len(denials) > 0 || !allowed && (len(denials) != 1 || !strings.HasPrefix(denials[0], "odd replicas only")) {
			t.Errorf("%s: denials %q, allowed %v", obj, denials, allowed)
		}
	}
}
