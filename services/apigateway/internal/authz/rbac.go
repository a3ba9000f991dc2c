// Package authz decides whether a caller may do what a request asks:
// kube-apiserver's authorization, with its RBAC authorizer's semantics
// (Roles, ClusterRoles, RoleBindings, ClusterRoleBindings; resource names,
// subresources, non-resource URLs, "*") and its system:masters bypass.
//
// The decision reads an in-memory policy (policy.go) that one store watch
// per gateway keeps current (watch.go): no request reads the store, and a
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
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/meridian-cp/meridian/lib/identity"
	rbacv1 "k8s.io/api/rbac/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// MastersGroup is the group whose members may do anything: kube-apiserver
// allows them before RBAC is asked (its privileged-group authorizer).
const MastersGroup = user.SystemPrivilegedGroup

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

// RBAC is the RBAC authorizer. Its policy comes from the store (New and
// Run) or from a fixed set of objects (NewStatic).
type RBAC struct {
	cfg Config
	// policy is the current policy; nil until the first is built.
	policy atomic.Pointer[policy]
	// synced is closed once policy is set.
	synced     chan struct{}
	syncedOnce sync.Once
}

// current returns the policy, waiting for the first one until ctx ends.
func (r *RBAC) current(ctx context.Context) (*policy, error) {
	if p := r.policy.Load(); p != nil {
		return p, nil
	}
	select {
	case <-r.synced:
		return r.policy.Load(), nil
	case <-ctx.Done():
		return nil, errors.New("authz: the RBAC policy has not been read from the store yet")
	}
}

func (r *RBAC) publish(p *policy) {
	r.policy.Store(p)
	r.syncedOnce.Do(func() { close(r.synced) })
}

// WaitSynced waits until the first policy is built (the store's RBAC
// objects read), or ctx ends.
func (r *RBAC) WaitSynced(ctx context.Context) error {
	_, err := r.current(ctx)
	return err
}

// Revision is the store revision of the current policy; 0 before the
// first.
func (r *RBAC) Revision() int64 {
	if p := r.policy.Load(); p != nil {
		return p.rev
	}
	return 0
}

func masters(groups []string) bool { return slices.Contains(groups, MastersGroup) }

// Allowed decides a: members of system:masters may do anything; anyone
// else needs a rule that allows a in a role bound to them cluster-wide or
// in a's namespace.
func (r *RBAC) Allowed(ctx context.Context, a Attributes) (bool, string) {
	if masters(a.User.Groups) {
		return true, ""
	}
	p, err := r.current(ctx)
	if err != nil {
		return false, "RBAC: " + err.Error()
	}
	allowed, _, reason := p.decide(&a, false)
	return allowed, reason
}

// Explain is Allowed that also gives the reason of an allowed decision:
// the binding that allowed it, as kube-apiserver's RBAC authorizer words
// it ("" for system:masters). It costs more than Allowed; the front end
// asks it only for audited requests (the authorization.k8s.io/reason
// annotation).
func (r *RBAC) Explain(ctx context.Context, a Attributes) (bool, string) {
	if masters(a.User.Groups) {
		return true, ""
	}
	p, err := r.current(ctx)
	if err != nil {
		return false, "RBAC: " + err.Error()
	}
	allowed, by, denial := p.decide(&a, true)
	if allowed {
		return true, by
	}
	return false, denial
}

// decide looks for a rule that allows a. With explain, an allowed
// decision returns the binding that allowed it; a denied one returns the
// errors of the bindings that name the user but whose roles do not exist,
// as kube-apiserver's reason ("RBAC: ..."), or "".
func (p *policy) decide(a *Attributes, explain bool) (allowed bool, by string, denial string) {
	var errs []error
	check := func(b *binding) bool {
		rules, err := p.roleRules(b.roleRef, b.namespace)
		if err != nil {
			errs = append(errs, err)
			return false
		}
		for i := range rules {
			if ruleAllows(&rules[i], a) {
				return true
			}
		}
		return false
	}
	var found *binding
	p.visit(a.User.Name, a.User.Groups, a.Namespace, func(b *binding) bool {
		if check(b) {
			found = b
			return false
		}
		return true
	})
	if found != nil {
		if explain {
			by = "RBAC: allowed by " + found.describe(found.appliedSubject(a.User.Name, a.User.Groups))
		}
		return true, by, ""
	}
	if len(errs) > 0 {
		denial = "RBAC: " + utilerrors.NewAggregate(errs).Error()
	}
	return false, "", denial
}

// Authorize is authorizer.Authorizer's decision: Allow with the binding
// that allowed it as the reason ("" for system:masters), or NoOpinion
// with the resolution errors, as kube-apiserver's RBAC authorizer (behind
// its privileged-group authorizer) answers.
func (r *RBAC) Authorize(ctx context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	a := fromRecord(attrs)
	if masters(a.User.Groups) {
		return authorizer.DecisionAllow, "", nil
	}
	p, err := r.current(ctx)
	if err != nil {
		return authorizer.DecisionNoOpinion, "", err
	}
	allowed, by, denial := p.decide(&a, true)
	if allowed {
		return authorizer.DecisionAllow, by, nil
	}
	return authorizer.DecisionNoOpinion, denial, nil
}

// ConditionsAwareAuthorize is Authorize: RBAC sets no conditions.
func (r *RBAC) ConditionsAwareAuthorize(ctx context.Context, attrs authorizer.Attributes) authorizer.ConditionsAwareDecision {
	return authorizer.ConditionsAwareDecisionFromParts(r.Authorize(ctx, attrs))
}

// EvaluateConditions is not supported: RBAC sets no conditions.
func (r *RBAC) EvaluateConditions(context.Context, authorizer.ConditionsAwareDecision, authorizer.ConditionsData) (authorizer.Decision, string, error) {
	return authorizer.DecisionDeny, "", authorizer.ErrorConditionEvaluationNotSupported
}

// Rules returns the rules that apply to u in namespace (cluster-wide ones
// only when namespace is ""): those of the roles of every binding naming
// u, each binding once. err aggregates the bindings whose roles do not
// exist; the rules returned are still valid (rules only ever allow).
func (r *RBAC) Rules(ctx context.Context, u identity.User, namespace string) ([]rbacv1.PolicyRule, error) {
	p, err := r.current(ctx)
	if err != nil {
		return nil, err
	}
	var (
		rules []rbacv1.PolicyRule
		errs  []error
		seen  = map[*binding]bool{}
	)
	p.visit(u.Name, u.Groups, namespace, func(b *binding) bool {
		if seen[b] {
			return true
		}
		seen[b] = true
		rs, err := p.roleRules(b.roleRef, b.namespace)
		if err != nil {
			errs = append(errs, err)
			return true
		}
		rules = append(rules, rs...)
		return true
	})
	return rules, utilerrors.NewAggregate(errs)
}

// RoleRefRules returns the rules of the role a binding in namespace ("" for
// a ClusterRoleBinding) refers to, or a NotFound error.
func (r *RBAC) RoleRefRules(ctx context.Context, ref rbacv1.RoleRef, namespace string) ([]rbacv1.PolicyRule, error) {
	p, err := r.current(ctx)
	if err != nil {
		return nil, err
	}
	return p.roleRules(ref, namespace)
}

// RulesFor is authorizer.RuleResolver's view of Rules: what
// SelfSubjectRulesReview reports. Rules on resources and rules on
// non-resource URLs are listed apart; the list is never incomplete.
func (r *RBAC) RulesFor(ctx context.Context, u user.Info, namespace string) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo, bool, error) {
	rules, err := r.Rules(ctx, identity.User{Name: u.GetName(), Groups: u.GetGroups()}, namespace)
	resourceRules, nonResourceRules := ruleInfos(rules)
	return resourceRules, nonResourceRules, false, err
}

func ruleInfos(rules []rbacv1.PolicyRule) ([]authorizer.ResourceRuleInfo, []authorizer.NonResourceRuleInfo) {
	var (
		resourceRules    []authorizer.ResourceRuleInfo
		nonResourceRules []authorizer.NonResourceRuleInfo
	)
	for _, rule := range rules {
		if len(rule.Resources) > 0 {
			resourceRules = append(resourceRules, &authorizer.DefaultResourceRuleInfo{
				Verbs: rule.Verbs, APIGroups: rule.APIGroups, Resources: rule.Resources, ResourceNames: rule.ResourceNames,
			})
		}
		if len(rule.NonResourceURLs) > 0 {
			nonResourceRules = append(nonResourceRules, &authorizer.DefaultNonResourceRuleInfo{
				Verbs: rule.Verbs, NonResourceURLs: rule.NonResourceURLs,
			})
		}
	}
	return resourceRules, nonResourceRules
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
