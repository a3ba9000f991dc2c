package celpolicy

import (
	"context"
	"errors"
	"fmt"
	"strings"

	celtypes "github.com/google/cel-go/common/types"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"

	"github.com/meridian-cp/meridian/lib/kube/celenv"
)

// validate evaluates the policy for one param (nil: none) over the
// request's shared CEL input, with budget the runtime cost budget
// (celenv.RuntimeBudget), with the decisions, messages, audit
// annotations, cost budgets and failurePolicy handling of kube-apiserver's
// validating.Validator (k8s.io/apiserver v0.37): match conditions first
// (no match: no decisions); the validations under one runtime budget, the
// message expressions under what they left, the audit annotations under a
// budget of their own; an evaluation error or an exhausted budget is an
// error decision, Deny under failurePolicy Fail and Admit under Ignore.
// The request's values are built once per request (in) instead of once
// per policy and list of expressions; and when the policy's worst-case
// cost for this request's input sizes fits the limits (untracked.fits),
// the validations and message expressions run as programs without cost
// tracking, falling back to the tracked programs on any evaluation error.
// Those are the only differences.
func (p *validatingPolicy) validate(ctx context.Context, in *celInput, a *attributes, param runtime.Object, budget int64) validateResult {
	f := admissionregistrationv1.Fail
	if fp := p.obj.Spec.FailurePolicy; fp != nil {
		f = *fp
	}
	errorResult := func(msg string) validateResult {
		return validateResult{Decisions: []policyDecision{{Action: decisionForError(f), Evaluation: evalError, Message: msg}}}
	}
	if p.conditions != nil {
		m := p.conditions.Match(ctx, a.versioned, param, in.authz)
		if m.Error != nil {
			return errorResult(m.Error.Error())
		}
		if !m.Matches {
			return validateResult{}
		}
	}
	var params any
	if e := p.params.converted(param); e != nil {
		params = e.val
	} else {
		params = paramValue(param)
	}
	var evalResults, messageResults []plugincel.EvaluationResult
	var err error
	untracked := false
	if p.untracked != nil {
		if size := inputSize(in, p.params, param); p.untracked.fits(size, budget) {
			evalResults, messageResults, untracked = p.untracked.eval(ctx, in, params, p.untracked.quick(size), p.validations, p.messages)
		}
	}
	if !untracked {
		var remaining int64
		evalResults, remaining, err = p.validations.forInput(ctx, &activation{in: in, params: params, authorizer: true}, budget)
		if err != nil {
			return errorResult(err.Error())
		}
		if !p.messages.empty {
			messageResults, _, err = p.messages.forInput(ctx, &activation{in: in, params: params}, remaining)
		}
	}
	decisions := in.scratch.decisions(len(evalResults))
	for i, evalResult := range evalResults {
		d := &decisions[i]
		validation := evalResult.ExpressionAccessor.(*validationCondition)
		var messageResult *plugincel.EvaluationResult
		if len(messageResults) > i {
			messageResult = &messageResults[i]
		}
		switch {
		case evalResult.Error != nil:
			d.Action, d.Evaluation, d.Message = decisionForError(f), evalError, evalResult.Error.Error()
		case errors.Is(err, apiservercel.ErrInternal) || errors.Is(err, apiservercel.ErrOutOfBudget):
			d.Action, d.Evaluation, d.Message = decisionForError(f), evalError, fmt.Sprintf("failed messageExpression: %s", err)
		case evalResult.EvalResult != celtypes.True:
			d.Action, d.Evaluation = actionDeny, evalDeny
			d.Reason = metav1.StatusReasonInvalid
			if validation.Reason != nil {
				d.Reason = *validation.Reason
			}
			d.Message = denyMessage(validation, messageResult)
		default:
			d.Action, d.Evaluation = actionAdmit, evalAdmit
		}
	}
	if p.annotations.empty {
		return validateResult{Decisions: decisions, AuditAnnotations: []policyAuditAnnotation{}}
	}
	annotationResults, _, err := p.annotations.forInput(ctx, &activation{in: in, params: params, rawNamespace: true}, budget)
	if err != nil {
		return errorResult(err.Error())
	}
	annotations := make([]policyAuditAnnotation, len(annotationResults))
	for i, r := range annotationResults {
		an := &annotations[i]
		c := r.ExpressionAccessor.(*auditAnnotationCondition)
		an.Key = c.Key
		if r.Error != nil {
			an.Action, an.Error = auditAnnotationForError(f), r.Error.Error()
			continue
		}
		switch r.EvalResult.Type() {
		case celtypes.StringType:
			if v := strings.TrimSpace(r.EvalResult.Value().(string)); v == "" {
				an.Action = auditAnnotationExclude
			} else {
				an.Action, an.Value = auditAnnotationPublish, v
			}
		case celtypes.NullType:
			an.Action = auditAnnotationExclude
		default:
			an.Action = auditAnnotationError
			an.Error = fmt.Sprintf("valueExpression '%v' resulted in unsupported return type: %v. "+
				"Return type must be either string or null.", c.ValueExpression, r.EvalResult.Type())
		}
	}
	return validateResult{Decisions: decisions, AuditAnnotations: annotations}
}

// denyMessage is a failed validation's message: its messageExpression's
// result when that is a non-empty single-line string within the size
// limit, else its message, else "failed expression: <expression>".
func denyMessage(v *validationCondition, m *plugincel.EvaluationResult) string {
	var message string
	if m != nil && m.Error == nil && m.EvalResult != nil {
		if s, ok := m.EvalResult.Value().(string); ok {
			message = strings.TrimSpace(s)
			if len(message) > celenv.MaxMessageExpressionBytes || strings.ContainsAny(message, "\n") {
				message = ""
			}
		}
	}
	if message == "" && len(v.Message) > 0 {
		message = strings.TrimSpace(v.Message)
	}
	if message == "" {
		message = fmt.Sprintf("failed expression: %v", strings.TrimSpace(v.Expression))
	}
	return message
}

// decisionForError is what an evaluation error decides under f.
func decisionForError(f admissionregistrationv1.FailurePolicyType) decisionAction {
	if f == admissionregistrationv1.Ignore {
		return actionAdmit
	}
	return actionDeny
}

// auditAnnotationForError is what an audit annotation's evaluation error
// does under f.
func auditAnnotationForError(f admissionregistrationv1.FailurePolicyType) auditAnnotationAction {
	if f == admissionregistrationv1.Ignore {
		return auditAnnotationExclude
	}
	return auditAnnotationError
}
