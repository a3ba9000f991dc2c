// Package admissionmetrics holds the admission service's metrics under
// kube-apiserver's names and labels (the Kubernetes metrics reference,
// kubernetes.io/docs/reference/instrumentation/metrics/), so that
// dashboards and alerts written for kube-apiserver's admission work
// unchanged.
package admissionmetrics

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meridian-cp/meridian/lib/telemetry"
	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
)

// Step types, as kube-apiserver's "type" label.
const (
	// TypeAdmit is the mutating step.
	TypeAdmit = "admit"
	// TypeValidate is the validating step.
	TypeValidate = "validate"
)

// Error types of apiserver_admission_webhook_rejection_count.
const (
	// WebhookNoError: the webhook answered and denied the request.
	WebhookNoError = "no_error"
	// WebhookCallingError: calling the webhook failed (failurePolicy Fail).
	WebhookCallingError = "calling_webhook_error"
	// WebhookInternalError: the webhook's answer could not be used.
	WebhookInternalError = "apiserver_internal_error"
)

// Error types of apiserver_validating_admission_policy_check_total.
const (
	// PolicyNoError: the policy was evaluated.
	PolicyNoError = "no_error"
	// PolicyInvalidError: the policy or its binding could not be
	// configured or evaluated.
	PolicyInvalidError = "invalid_error"
)

// Error types of apiserver_mutating_admission_policy_check_total, as
// kube-apiserver's mutating policy plugin classifies a mutation's error.
const (
	// MutationNoError: the mutation was applied.
	MutationNoError = "no_error"
	// MutationCompileError: the mutation's expression did not compile.
	MutationCompileError = "compile_error"
	// MutationInvalidError: the mutation failed for another reason (the
	// policy or binding could not be configured, the patch was invalid).
	MutationInvalidError = "invalid_error"
	// MutationOutOfBudget: the expression ran out of cost budget.
	MutationOutOfBudget = "out_of_budget"
)

// Metrics are the admission metrics. A nil *Metrics records nothing.
type Metrics struct {
	step          *prometheus.HistogramVec // operation, rejected, type
	webhook       *prometheus.HistogramVec // name, operation, rejected, type
	rejections    *prometheus.CounterVec   // error_type, name, operation, rejection_code, type
	check         *prometheus.CounterVec   // policy, policy_binding, enforcement_action, error_type
	checkDuration *prometheus.HistogramVec // policy, policy_binding, enforcement_action, error_type
	mutation      *prometheus.CounterVec   // policy, policy_binding, error_type
	mutationTime  *prometheus.HistogramVec // policy, policy_binding, error_type
}

// New registers the metrics with reg (nil: a private registry).
func New(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	var m Metrics
	var err error
	// Buckets are kube-apiserver's for these series.
	if m.step, err = telemetry.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "apiserver_admission_step_admission_duration_seconds",
		Help:    "Admission sub-step latency histogram in seconds, broken out for each operation and API resource and step type (validate or admit).",
		Buckets: []float64{0.005, 0.025, 0.1, 0.5, 1.0, 2.5},
	}, []string{"operation", "rejected", "type"})); err != nil {
		return nil, fmt.Errorf("admission metrics: %w", err)
	}
	if m.webhook, err = telemetry.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "apiserver_admission_webhook_admission_duration_seconds",
		Help:    "Admission webhook latency histogram in seconds, identified by name and broken out for each operation and API resource and type (validate or admit).",
		Buckets: []float64{0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10, 25},
	}, []string{"name", "operation", "rejected", "type"})); err != nil {
		return nil, fmt.Errorf("admission metrics: %w", err)
	}
	if m.rejections, err = telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "apiserver_admission_webhook_rejection_count",
		Help: "Admission webhook rejection count, identified by name and broken out for each admission type (validating or admit) and operation. Additional labels specify an error type (calling_webhook_error or apiserver_internal_error if an error occurred; no_error otherwise) and optionally a non-zero rejection code if the webhook rejects the request with an HTTP status code.",
	}, []string{"error_type", "name", "operation", "rejection_code", "type"})); err != nil {
		return nil, fmt.Errorf("admission metrics: %w", err)
	}
	labels := []string{"policy", "policy_binding", "enforcement_action", "error_type"}
	if m.check, err = telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "apiserver_validating_admission_policy_check_total",
		Help: "Validation admission policy check total, labeled by policy and further identified by binding and enforcement action taken.",
	}, labels)); err != nil {
		return nil, fmt.Errorf("admission metrics: %w", err)
	}
	if m.checkDuration, err = telemetry.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "apiserver_validating_admission_policy_check_duration_seconds",
		Help:    "Validation admission latency for individual validation expressions in seconds, labeled by policy and further including binding and enforcement action taken.",
		Buckets: []float64{0.0000005, 0.001, 0.01, 0.1, 1.0},
	}, labels)); err != nil {
		return nil, fmt.Errorf("admission metrics: %w", err)
	}
	mlabels := []string{"policy", "policy_binding", "error_type"}
	if m.mutation, err = telemetry.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "apiserver_mutating_admission_policy_check_total",
		Help: "Mutation admission policy check total, labeled by policy and further identified by binding.",
	}, mlabels)); err != nil {
		return nil, fmt.Errorf("admission metrics: %w", err)
	}
	if m.mutationTime, err = telemetry.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "apiserver_mutating_admission_policy_check_duration_seconds",
		Help:    "Mutation admission latency for individual mutation expressions in seconds, labeled by policy and binding.",
		Buckets: []float64{0.0000005, 0.001, 0.01, 0.1, 1.0},
	}, mlabels)); err != nil {
		return nil, fmt.Errorf("admission metrics: %w", err)
	}
	return &m, nil
}

// Operation is the label value of op: CREATE, UPDATE, DELETE or CONNECT.
func Operation(op admissionv1.Operation) string {
	return strings.TrimPrefix(op.String(), "OPERATION_")
}

// ObserveStep records one admission step (typ TypeAdmit or TypeValidate)
// of a request.
func (m *Metrics) ObserveStep(op admissionv1.Operation, typ string, rejected bool, elapsed time.Duration) {
	if m == nil {
		return
	}
	m.step.WithLabelValues(Operation(op), strconv.FormatBool(rejected), typ).Observe(elapsed.Seconds())
}

// ObserveWebhook records one call of the webhook name; when it rejected
// the request, errorType says why and code is the HTTP status code of
// the rejection.
func (m *Metrics) ObserveWebhook(name string, op admissionv1.Operation, typ string, rejected bool, errorType string, code int32, elapsed time.Duration) {
	if m == nil {
		return
	}
	o := Operation(op)
	m.webhook.WithLabelValues(name, o, strconv.FormatBool(rejected), typ).Observe(elapsed.Seconds())
	if rejected {
		m.rejections.WithLabelValues(errorType, name, o, strconv.Itoa(int(code)), typ).Inc()
	}
}

// PolicyCheck records the checks of one ValidatingAdmissionPolicy through
// one binding, as ObservePolicyCheck does, holding the series of the
// common outcome (allow, no error) once it has been recorded, so that a
// check does not look its series up by labels. Safe for concurrent use.
type PolicyCheck struct {
	m               *Metrics
	policy, binding string
	allow           atomic.Pointer[policyCheckSeries]
}

type policyCheckSeries struct {
	count    prometheus.Counter
	duration prometheus.Observer
}

// PolicyCheck returns the recorder of policy's checks through binding;
// nil (recording nothing) when m is nil.
func (m *Metrics) PolicyCheck(policy, binding string) *PolicyCheck {
	if m == nil {
		return nil
	}
	return &PolicyCheck{m: m, policy: policy, binding: binding}
}

// Observe records one check under one enforcement action, as
// ObservePolicyCheck.
func (c *PolicyCheck) Observe(enforcementAction, errorType string, elapsed time.Duration) {
	if c == nil {
		return
	}
	if enforcementAction != "allow" || errorType != PolicyNoError {
		c.m.ObservePolicyCheck(c.policy, c.binding, enforcementAction, errorType, elapsed)
		return
	}
	s := c.allow.Load()
	if s == nil {
		// Concurrent first checks may each look the series up; they
		// find the same series.
		s = &policyCheckSeries{
			count:    c.m.check.WithLabelValues(c.policy, c.binding, enforcementAction, errorType),
			duration: c.m.checkDuration.WithLabelValues(c.policy, c.binding, enforcementAction, errorType),
		}
		c.allow.Store(s)
	}
	s.count.Inc()
	s.duration.Observe(elapsed.Seconds())
}

// ObservePolicyCheck records one check of a ValidatingAdmissionPolicy
// through one binding under one enforcement action: "allow" when no
// validation failed, else each action the binding took ("deny", "warn",
// "audit"), one call per action as kube-apiserver records them.
func (m *Metrics) ObservePolicyCheck(policy, binding, enforcementAction, errorType string, elapsed time.Duration) {
	if m == nil {
		return
	}
	m.check.WithLabelValues(policy, binding, enforcementAction, errorType).Inc()
	m.checkDuration.WithLabelValues(policy, binding, enforcementAction, errorType).Observe(elapsed.Seconds())
}

// ObserveMutation records one mutation of a MutatingAdmissionPolicy
// applied through one binding (kube-apiserver records one per mutation of
// the policy's spec.mutations it runs), with the error type of err
// (MutationErrorType).
func (m *Metrics) ObserveMutation(policy, binding string, err error, elapsed time.Duration) {
	if m == nil {
		return
	}
	et := MutationErrorType(err)
	m.mutation.WithLabelValues(policy, binding, et).Inc()
	m.mutationTime.WithLabelValues(policy, binding, et).Observe(elapsed.Seconds())
}

// MutationErrorType is the error_type label of a mutation that ended with
// err, classified as kube-apiserver's mutating policy plugin does (by the
// CEL library's message prefixes).
func MutationErrorType(err error) string {
	switch {
	case err == nil:
		return MutationNoError
	case strings.HasPrefix(err.Error(), "compilation"):
		return MutationCompileError
	case strings.HasPrefix(err.Error(), "validation failed due to running out of cost budget"):
		return MutationOutOfBudget
	default:
		return MutationInvalidError
	}
}
