// Package authz decides whether a caller may do what a request asks:
// kube-apiserver's authorization, with its RBAC authorizer's semantics
// (Roles, ClusterRoles, RoleBindings, ClusterRoleBindings; resource names,
// subresources, non-resource URLs, "*") and its system:masters bypass.
//
// The decision is lib/kube/rbac's, over an in-memory policy that one store
// watch per gateway keeps current (watch.go): no request reads the store, and a
// change of a binding applies as soon as the watch delivers it, within
// milliseconds. The REST front end and the gRPC API ask Allowed before flow
// control admits a request; impersonation asks for the "impersonate"
// verb; writes of roles and bindings are checked for escalation
// (escalation.go). RBAC also implements k8s.io/apiserver's
// authorizer.Authorizer and authorizer.RuleResolver, the interfaces the
// SubjectAccessReview APIs and admission's CEL authorizer are written
// against.
package authz

import (
	"context"

	"github.com/meridian-cp/meridian/lib/kube/rbac"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// MastersGroup is the group whose members may do anything: kube-apiserver
// allows them before RBAC is asked (its privileged-group authorizer).
const MastersGroup = rbac.MastersGroup

// Authorizer decides requests. RBAC and AlwaysAllow implement it; it is
// also k8s.io/apiserver's authorizer.Authorizer and RuleResolver, for
// code written against those (the SubjectAccessReview APIs, admission's
// CEL authorizer). Implementations are safe for concurrent use.
type Authorizer interface {
	authorizer.Authorizer
	authorizer.RuleResolver
	// Allowed decides a for the request path: whether it is allowed and,
	// when it is not, the reason to add to the 403 (empty unless some
	// binding could not be resolved). An allowed request costs no reason.
	Allowed(ctx context.Context, a Attributes) (allowed bool, reason string)
}

// Explainer is an Authorizer that can say which grant allowed a request
// (RBAC: the binding).
type Explainer interface {
	Explain(ctx context.Context, a Attributes) (allowed bool, reason string)
}

// Explain decides a with z and, when z is an Explainer, gives the reason
// of an allowed decision too; otherwise it is z.Allowed.
func Explain(ctx context.Context, z Authorizer, a Attributes) (bool, string) {
	if e, ok := z.(Explainer); ok {
		return e.Explain(ctx, a)
	}
	return z.Allowed(ctx, a)
}

var (
	_ Explainer  = (*RBAC)(nil)
	_ Authorizer = (*RBAC)(nil)
	_ Authorizer = AlwaysAllow{}
)

// RBAC is the RBAC authorizer (lib/kube/rbac) with the gateway's store
// watch: its policy comes from the store (New and Run) or from a fixed set
// of objects (NewStatic).
type RBAC struct {
	*rbac.RBAC
	cfg Config
}

// AlwaysAllow allows every request: kube-apiserver's
// --authorization-mode=AlwaysAllow, for clusters without authorization
// (and for measuring what authorization costs).
type AlwaysAllow struct{}

// Allowed allows a.
func (AlwaysAllow) Allowed(context.Context, Attributes) (bool, string) { return true, "" }

// Authorize allows attrs.
func (AlwaysAllow) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	return authorizer.DecisionAllow, "", nil
}

// ConditionsAwareAuthorize allows attrs.
func (a AlwaysAllow) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(a.Authorize(ctx, attrs))
}

// EvaluateConditions is not supported.
func (AlwaysAllow) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

// RulesFor: every verb on everything.
func (AlwaysAllow) RulesFor(context.Context, user.Info, string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	return []authorizer.ResourceRuleInfo{&authorizer.DefaultResourceRuleInfo{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}}},
		[]authorizer.NonResourceRuleInfo{&authorizer.DefaultNonResourceRuleInfo{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}}, false, nil
}
