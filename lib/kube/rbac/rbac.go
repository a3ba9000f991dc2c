// Package rbac is kube-apiserver's RBAC authorizer: Roles, ClusterRoles,
// RoleBindings and ClusterRoleBindings (resource names, subresources,
// non-resource URLs, "*"), behind its system:masters bypass. The gateway
// authorizes its requests with it and the admission service answers CEL's
// `authorizer` with it; each feeds it from its own view of the store.
//
// The decision reads an immutable in-memory policy (policy.go) published
// from an Objects (the RBAC objects read from the store) whenever they
// change: no decision reads the store or takes a lock. RBAC implements
// k8s.io/apiserver's authorizer.Authorizer and authorizer.RuleResolver,
// the interfaces the SubjectAccessReview APIs and admission's CEL
// authorizer are written against.
package rbac

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/meridian-cp/meridian/lib/identity"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// MastersGroup is the group whose members may do anything: kube-apiserver
// allows them before RBAC is asked (its privileged-group authorizer).
const MastersGroup = user.SystemPrivilegedGroup

var (
	_ authorizer.Authorizer   = (*RBAC)(nil)
	_ authorizer.RuleResolver = (*RBAC)(nil)
)

// RBAC is the RBAC authorizer. Its policy is published from an Objects
// (New and Publish) or from a fixed set of objects (NewStatic).
type RBAC struct {
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
		return nil, errors.New("rbac: the RBAC policy has not been read from the store yet")
	}
}

// New returns an RBAC authorizer without a policy: decisions wait for
// the first Publish (see WaitSynced).
func New() *RBAC { return &RBAC{synced: make(chan struct{})} }

// NewStatic returns an RBAC authorizer whose policy is objs (Roles,
// ClusterRoles, RoleBindings and ClusterRoleBindings; anything else is
// ignored) and never changes: for tools and tests.
func NewStatic(objs ...runtime.Object) *RBAC {
	r := New()
	o := NewObjects()
	for _, obj := range objs {
		o.Put(obj)
	}
	r.Publish(o, 0, true)
	return r
}

// Publish makes the policy of o at store revision rev the one decisions
// read. With fresh (o holds every RBAC object, as after a new list), the
// policy is built from o alone; otherwise from the last policy and what o
// changed since it was last published. The caller owns o: Publish must not
// run concurrently with itself or with o's changes.
func (r *RBAC) Publish(o *Objects, rev int64, fresh bool) {
	base := r.policy.Load()
	if fresh || base == nil {
		base = emptyPolicy()
	}
	r.policy.Store(o.publish(base, rev))
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

// Masters reports whether groups include system:masters, whose members
// may do anything.
func Masters(groups []string) bool { return slices.Contains(groups, MastersGroup) }

// Allowed decides a: members of system:masters may do anything; anyone
// else needs a rule that allows a in a role bound to them cluster-wide or
// in a's namespace.
func (r *RBAC) Allowed(ctx context.Context, a Attributes) (bool, string) {
	if Masters(a.User.Groups) {
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
	if Masters(a.User.Groups) {
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
			if RuleAllows(&rules[i], a) {
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
	a := FromRecord(attrs)
	if Masters(a.User.Groups) {
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
