// Package celenv is meridian's one CEL environment: the Kubernetes base
// environment of k8s.io/apiserver/pkg/cel/environment (its libraries: lists,
// regex, URLs, quantity, IP and CIDR, semver, format, authz, optional types,
// cost estimation) at the compatibility version this build of the Kubernetes
// libraries serves, and the cost limits Kubernetes applies.
//
// CRD validation rules (x-kubernetes-validations) and admission policies
// (ValidatingAdmissionPolicy, MutatingAdmissionPolicy, match conditions)
// compile against Base, so an expression that compiles in one compiles in
// the other and costs the same, as in kube-apiserver.
package celenv

import (
	"github.com/google/cel-go/cel"
	"k8s.io/apimachinery/pkg/util/version"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"k8s.io/apiserver/pkg/cel/environment"
)

// Cost limits, in CEL cost units, as Kubernetes sets them
// (k8s.io/apiserver/pkg/apis/cel). One unit is roughly 100 ns of evaluation.
const (
	// PerCallLimit bounds the runtime cost of one expression's evaluation
	// and the estimated cost of one expression when it is written.
	PerCallLimit = celconfig.PerCallLimit
	// RuntimeBudget bounds the total runtime cost of all expressions
	// evaluated for one custom resource or one policy binding per request.
	RuntimeBudget = celconfig.RuntimeCELCostBudget
	// MatchConditionsBudget bounds the runtime cost of one webhook's or
	// binding's matchConditions per request.
	MatchConditionsBudget = celconfig.RuntimeCELCostBudgetMatchConditions
	// MaxRequestSizeBytes is the largest request body the cost estimator
	// assumes; it sizes unbounded strings and lists in estimates.
	MaxRequestSizeBytes = celconfig.MaxRequestSizeBytes
	// MaxMessageExpressionBytes bounds the string a messageExpression may
	// produce.
	MaxMessageExpressionBytes = celconfig.MaxEvaluatedMessageExpressionSizeBytes
)

// Base returns the base environment set. NewExpressionsEnv is for
// expressions being written (a CRD or policy create or update that changes
// them); StoredExpressionsEnv is for expressions already stored, which may
// use libraries a newer version added, so a rollback never breaks what is
// stored. The set is built once per process by the library and shared.
func Base() *environment.EnvSet {
	return environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion())
}

// Extend returns Base with the variables and types of one use added to
// every version (for example `object`, `oldObject`, `request`, `params`).
func Extend(opts ...cel.EnvOption) (*environment.EnvSet, error) {
	return Base().Extend(environment.VersionedOptions{
		// 1.0: present in every version, stored and new expressions alike.
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions:        opts,
	})
}
