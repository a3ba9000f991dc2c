package celpolicy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/meridian-cp/meridian/lib/kube/celenv"
	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/internal/admissionmetrics"
	"github.com/meridian-cp/meridian/services/admission/internal/policy"
)

// validatingPolicy is one ValidatingAdmissionPolicy, compiled once (as
// kube-apiserver's plugin compiles it: stored-expression environment,
// variables first, authorizer declared) and evaluated by validate.
type validatingPolicy struct {
	obj        *admissionregistrationv1.ValidatingAdmissionPolicy
	match      *matcher
	params     *paramSource            // nil without paramKind
	conditions matchconditions.Matcher // nil without matchConditions
	// validations, their message expressions (placeholders where a
	// validation has none) and the audit annotations.
	validations, messages, annotations expressions
	// untracked: the validations and message expressions as programs
	// without runtime cost tracking, nil when they may never be used.
	untracked *untracked
	err       error // a configuration error: the policy cannot be evaluated
}

func compileValidating(p *admissionregistrationv1.ValidatingAdmissionPolicy, params func(*admissionregistrationv1.ParamKind) (*paramSource, error)) *validatingPolicy {
	vp := &validatingPolicy{obj: p}
	cc, err := compileCommon(p.Name, p.Spec.MatchConstraints, p.Spec.ParamKind, p.Spec.Variables, p.Spec.MatchConditions, p.Spec.FailurePolicy, params)
	vp.match, vp.params = cc.match, cc.params
	if err != nil {
		vp.err = err
		return vp
	}
	vp.conditions = cc.conditions
	validations, messages, annotations := validatingAccessors(p)
	vp.validations = compileExpressions(cc.compiler, validations, cc.opts)
	vp.messages = compileExpressions(cc.compiler, messages, plugincel.OptionalVariableDeclarations{HasParams: cc.opts.HasParams})
	vp.annotations = compileExpressions(cc.compiler, annotations, cc.opts)
	vp.untracked = compileUntracked(p, vp.validations, vp.messages, cc.opts)
	return vp
}

// validatingAccessors are p's validations, message expressions (nil where
// a validation has none) and audit annotations, as kube-apiserver's
// plugin hands them to its compiler.
func validatingAccessors(p *admissionregistrationv1.ValidatingAdmissionPolicy) (validations, messages, annotations []plugincel.ExpressionAccessor) {
	validations = make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	messages = make([]plugincel.ExpressionAccessor, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		validations[i] = &validationCondition{Expression: v.Expression, Message: v.Message, Reason: v.Reason}
		if v.MessageExpression != "" {
			messages[i] = &messageExpressionCondition{MessageExpression: v.MessageExpression}
		}
	}
	annotations = make([]plugincel.ExpressionAccessor, len(p.Spec.AuditAnnotations))
	for i, a := range p.Spec.AuditAnnotations {
		annotations[i] = &auditAnnotationCondition{Key: a.Key, ValueExpression: a.ValueExpression}
	}
	return validations, messages, annotations
}

// common is what both kinds of policy compile alike: the match
// constraints, the params' source, the compiler holding the variables,
// and the match conditions (nil without any).
type common struct {
	match      *matcher
	params     *paramSource
	compiler   *plugincel.CompositedCompiler
	opts       plugincel.OptionalVariableDeclarations
	conditions matchconditions.Matcher
}

// compileCommon compiles what both kinds of policy share, as
// kube-apiserver's plugins do: the stored-expression environment of
// lib/kube/celenv, variables first, the authorizer declared.
func compileCommon(name string, mr *admissionregistrationv1.MatchResources, pk *admissionregistrationv1.ParamKind,
	variables []admissionregistrationv1.Variable, conditions []admissionregistrationv1.MatchCondition,
	fp *admissionregistrationv1.FailurePolicyType, params func(*admissionregistrationv1.ParamKind) (*paramSource, error)) (common, error) {
	var cc common
	var err error
	if cc.match, err = newMatcher(mr); err != nil {
		return cc, err
	}
	if pk != nil {
		if cc.params, err = params(pk); err != nil {
			return cc, err
		}
	}
	cc.opts = plugincel.OptionalVariableDeclarations{HasParams: pk != nil, HasAuthorizer: true}
	if cc.compiler, err = plugincel.NewCompositedCompiler(celenv.Base()); err != nil {
		return cc, err
	}
	vars := make([]plugincel.NamedExpressionAccessor, len(variables))
	for i, v := range variables {
		vars[i] = &variable{Name: v.Name, Expression: v.Expression}
	}
	cc.compiler.CompileAndStoreVariables(vars, cc.opts, environment.StoredExpressions)
	if len(conditions) > 0 {
		acc := make([]plugincel.ExpressionAccessor, len(conditions))
		for i := range conditions {
			acc[i] = (*matchconditions.MatchCondition)(&conditions[i])
		}
		cc.conditions = matchconditions.NewMatcher(cc.compiler.CompileCondition(acc, cc.opts, environment.StoredExpressions), fp, "policy", "validate", name)
	}
	return cc, nil
}

// ignoreFailure is the policy's failurePolicy: Ignore.
func (p *validatingPolicy) ignoreFailure() bool {
	return p.obj.Spec.FailurePolicy != nil && *p.obj.Spec.FailurePolicy == admissionregistrationv1.Ignore
}

// validatingInvocation is one binding of one policy, for one request.
type validatingInvocation struct {
	req     *request
	policy  *validatingPolicy
	binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	metrics *admissionmetrics.PolicyCheck // nil: none
}

var (
	_ policy.Policy = (*validatingInvocation)(nil)
	_ policy.Named  = (*validatingInvocation)(nil)
)

// Name is the policy's name, which its trace span carries.
func (v *validatingInvocation) Name() string { return v.policy.obj.Name }

// Evaluate checks the request (check) and records the check in the
// policy metrics: one series per enforcement action taken (deny, warn,
// audit), or allow.
func (v *validatingInvocation) Evaluate(ctx context.Context, req *admissionv1.AdmitRequest) (policy.Decision, error) {
	start := time.Now()
	d, invalid, err := v.check(ctx, req)
	if err != nil || v.metrics == nil {
		return d, err
	}
	elapsed := time.Since(start)
	errorType := admissionmetrics.PolicyNoError
	if invalid {
		errorType = admissionmetrics.PolicyInvalidError
	}
	var buf [3]string // at most deny, warn and audit
	actions := buf[:0]
	if d.Denial != nil {
		actions = append(actions, "deny")
	}
	if len(d.Warnings) > 0 {
		actions = append(actions, "warn")
	}
	if _, ok := d.AuditAnnotations[validationFailureAnnotation]; ok {
		// kube-apiserver counts Audit only with a failed validation,
		// which is when it writes this annotation.
		actions = append(actions, "audit")
	}
	if len(actions) == 0 {
		actions = append(actions, "allow")
	}
	for _, a := range actions {
		v.metrics.Observe(a, errorType, elapsed)
	}
	return d, nil
}

// check runs the policy's validations for each param object the
// binding selects, and turns failed validations into what the binding's
// validationActions say: a denial (Deny), warnings (Warn), audit
// annotations (Audit). Errors are decided by failurePolicy here, so it
// never returns one but ctx's; invalid reports that the policy or
// binding could not be configured or evaluated.
func (v *validatingInvocation) check(ctx context.Context, req *admissionv1.AdmitRequest) (_ policy.Decision, invalid bool, _ error) {
	a, err := v.req.attributes(req)
	if err != nil {
		return v.configError(err), true, nil
	}
	var d policy.Decision
	p, b := v.policy, v.binding
	if p.err != nil {
		return v.configError(fmt.Errorf("failed to configure policy: %w", p.err)), true, nil
	}
	// One nil param without paramKind or paramRef (as collect returns
	// it), without allocating.
	var noParam [1]runtime.Object
	params := noParam[:]
	if p.params != nil && b.Spec.ParamRef != nil {
		if params, err = p.params.collect(b.Spec.ParamRef, a); err != nil {
			return v.configError(fmt.Errorf("failed to configure binding: %w", err)), true, nil
		}
	}
	in, err := v.req.celInput()
	if err != nil {
		return v.configError(err), true, nil
	}
	var failures []validationFailure
	var annotations map[string]string // allocated by the first annotation
	for _, param := range params {
		res := p.validate(ctx, in, a, param, celenv.RuntimeBudget)
		if ctx.Err() != nil {
			return policy.Decision{}, false, ctx.Err()
		}
		for i, dec := range res.Decisions {
			if dec.Action != actionDeny {
				continue
			}
			for _, action := range b.Spec.ValidationActions {
				switch action {
				case admissionregistrationv1.Deny:
					if d.Denial == nil {
						d.Denial = v.denial(a, dec.Message, dec.Reason)
					}
				case admissionregistrationv1.Warn:
					d.Warnings = append(d.Warnings, fmt.Sprintf("Validation failed for ValidatingAdmissionPolicy '%s' with binding '%s': %s", p.obj.Name, b.Name, dec.Message))
				case admissionregistrationv1.Audit:
					failures = append(failures, validationFailure{
						ExpressionIndex: i, Message: dec.Message, ValidationActions: b.Spec.ValidationActions, Binding: b.Name, Policy: b.Spec.PolicyName,
					})
				}
			}
		}
		for _, an := range res.AuditAnnotations {
			switch an.Action {
			case auditAnnotationPublish:
				value := an.Value
				if len(value) > maxAuditAnnotationValueLength {
					value = value[:maxAuditAnnotationValueLength]
				}
				if annotations == nil {
					annotations = map[string]string{}
				}
				key := p.obj.Name + "/" + an.Key
				if prev, ok := annotations[key]; ok && prev != value {
					value = prev + ", " + value
				}
				annotations[key] = value
			case auditAnnotationError:
				if d.Denial == nil {
					d.Denial = v.denial(a, an.Error, "")
				}
			}
		}
	}
	if len(failures) > 0 {
		if annotations == nil {
			annotations = map[string]string{}
		}
		if js, err := json.Marshal(failures); err == nil {
			annotations[validationFailureAnnotation] = string(js)
		}
	}
	if len(annotations) > 0 {
		d.AuditAnnotations = annotations
	}
	return d, false, nil
}

// maxAuditAnnotationValueLength bounds one audit annotation's value, as
// kube-apiserver bounds it.
const maxAuditAnnotationValueLength = 10 * 1024

// denial is a Deny decision as kube-apiserver words it: the policy and
// binding named, the validation's reason (Invalid when none) and its
// HTTP code, and the "<resource> "<name>" is forbidden: " prefix of
// admission errors.
func (v *validatingInvocation) denial(a *attributes, message string, reason metav1.StatusReason) *policy.Denial {
	msg := fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %s", v.policy.obj.Name, v.binding.Name, message)
	if reason == "" {
		reason = metav1.StatusReasonInvalid
	}
	return &policy.Denial{Code: reasonToCode(reason), Reason: string(reason), Message: forbiddenMessage(a, msg)}
}

// configError is a policy or binding that cannot be evaluated: ignored
// under failurePolicy Ignore, else a denial naming both.
func (v *validatingInvocation) configError(err error) policy.Decision {
	if v.policy.ignoreFailure() {
		return policy.Decision{}
	}
	msg := fmt.Sprintf("ValidatingAdmissionPolicy '%s' with binding '%s' denied request: %v", v.policy.obj.Name, v.binding.Name, err)
	return policy.Decision{Denial: &policy.Denial{Code: http.StatusUnprocessableEntity, Reason: string(metav1.StatusReasonInvalid), Message: msg}}
}

const (
	// validationFailureAnnotation is kube-apiserver's audit annotation of
	// the failed validations whose binding says Audit.
	validationFailureAnnotation = "validation.policy.admission.k8s.io/validation_failure"
)

// forbiddenMessage is msg as admission.NewForbidden words it for a.
func forbiddenMessage(a admission.Attributes, msg string) string {
	var se *apierrors.StatusError
	if errors.As(admission.NewForbidden(a, errors.New(msg)), &se) {
		return se.ErrStatus.Message
	}
	return msg
}

// reasonToCode is the HTTP code of a validation's reason, as
// kube-apiserver maps it.
func reasonToCode(r metav1.StatusReason) int32 {
	switch r {
	case metav1.StatusReasonForbidden:
		return http.StatusForbidden
	case metav1.StatusReasonUnauthorized:
		return http.StatusUnauthorized
	case metav1.StatusReasonRequestEntityTooLarge:
		return http.StatusRequestEntityTooLarge
	default:
		return http.StatusUnprocessableEntity
	}
}
