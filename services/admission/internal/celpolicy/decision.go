package celpolicy

import (
	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
)

// The results of a ValidatingAdmissionPolicy's evaluation, and the
// expressions it compiles, as kube-apiserver's validating plugin
// (k8s.io/apiserver/pkg/admission/plugin/policy/validating) names them,
// with the same values. They are declared here because that package
// links client-go's clientset, informers and scheme (every group and
// version) into the binary; validate_test.go checks validate against it.

// decisionAction is what a validation decides.
type decisionAction string

const (
	actionAdmit decisionAction = "admit"
	actionDeny  decisionAction = "deny"
)

// decisionEvaluation is how a validation evaluated.
type decisionEvaluation string

const (
	evalAdmit decisionEvaluation = "admit"
	evalError decisionEvaluation = "error"
	evalDeny  decisionEvaluation = "deny"
)

// policyDecision is the outcome of one validation.
type policyDecision struct {
	Action     decisionAction
	Evaluation decisionEvaluation
	Message    string
	Reason     metav1.StatusReason
}

// auditAnnotationAction is what becomes of an audit annotation.
type auditAnnotationAction string

const (
	// auditAnnotationPublish: the annotation is recorded.
	auditAnnotationPublish auditAnnotationAction = "publish"
	// auditAnnotationError: the valueExpression failed (under
	// failurePolicy Fail) or returned neither a string nor null.
	auditAnnotationError auditAnnotationAction = "error"
	// auditAnnotationExclude: the value is null or empty, or the
	// valueExpression failed under failurePolicy Ignore.
	auditAnnotationExclude auditAnnotationAction = "exclude"
)

// policyAuditAnnotation is the outcome of one audit annotation.
type policyAuditAnnotation struct {
	Key    string
	Value  string
	Action auditAnnotationAction
	Error  string
}

// validateResult is the outcome of a policy's evaluation for one param.
type validateResult struct {
	Decisions        []policyDecision
	AuditAnnotations []policyAuditAnnotation
}

// validationFailure is one failed validation of a binding with the Audit
// action, as the validation failure audit annotation lists them (JSON).
type validationFailure struct {
	Message           string                                     `json:"message"`
	Policy            string                                     `json:"policy"`
	Binding           string                                     `json:"binding"`
	ExpressionIndex   int                                        `json:"expressionIndex"`
	ValidationActions []admissionregistrationv1.ValidationAction `json:"validationActions"`
}

// validationCondition is a validation's expression (a bool), with its
// message and reason.
type validationCondition struct {
	Expression string
	Message    string
	Reason     *metav1.StatusReason
}

func (v *validationCondition) GetExpression() string    { return v.Expression }
func (v *validationCondition) ReturnTypes() []*cel.Type { return []*cel.Type{cel.BoolType} }

// messageExpressionCondition is a validation's messageExpression (a
// string).
type messageExpressionCondition struct {
	MessageExpression string
}

func (m *messageExpressionCondition) GetExpression() string { return m.MessageExpression }
func (m *messageExpressionCondition) ReturnTypes() []*cel.Type {
	return []*cel.Type{cel.StringType}
}

// auditAnnotationCondition is an audit annotation's valueExpression (a
// string or null).
type auditAnnotationCondition struct {
	Key             string
	ValueExpression string
}

func (a *auditAnnotationCondition) GetExpression() string { return a.ValueExpression }
func (a *auditAnnotationCondition) ReturnTypes() []*cel.Type {
	return []*cel.Type{cel.StringType, cel.NullType}
}

// variable is a policy's variable (any type).
type variable struct {
	Name       string
	Expression string
}

func (v *variable) GetExpression() string    { return v.Expression }
func (v *variable) ReturnTypes() []*cel.Type { return []*cel.Type{cel.AnyType, cel.DynType} }
func (v *variable) GetName() string          { return v.Name }

var (
	_ plugincel.ExpressionAccessor      = (*validationCondition)(nil)
	_ plugincel.ExpressionAccessor      = (*messageExpressionCondition)(nil)
	_ plugincel.ExpressionAccessor      = (*auditAnnotationCondition)(nil)
	_ plugincel.NamedExpressionAccessor = (*variable)(nil)
)
