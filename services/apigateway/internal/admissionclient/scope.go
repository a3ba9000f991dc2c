package admissionclient

import (
	"slices"
	"strings"

	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
)

// matcher is a received Scope, ready to test requests against. It is
// immutable.
type matcher struct {
	everything bool
	rules      []rule
}

// rule is a ScopeRule. An empty list or a "*" in it covers anything
// (anyOp, anyGroup, anyResource).
type rule struct {
	anyOp       bool
	ops         []admissionv1.Operation
	anyGroup    bool
	groups      []string
	anyResource bool
	resources   []resourcePattern
}

// resourcePattern is one entry of ScopeRule.resources, split at the
// slash: "pods/status" is {pods, status}, "pods" is {pods, ""}, "*/*" is
// {*, *}.
type resourcePattern struct {
	resource, subresource string
}

// compile builds the matcher of sc.
func compile(sc *admissionv1.Scope) *matcher {
	m := &matcher{everything: sc.GetEverything()}
	if m.everything {
		return m
	}
	for _, r := range sc.GetRules() {
		cr := rule{
			anyOp:       len(r.GetOperations()) == 0,
			ops:         r.GetOperations(),
			anyGroup:    len(r.GetApiGroups()) == 0 || slices.Contains(r.GetApiGroups(), "*"),
			groups:      r.GetApiGroups(),
			anyResource: len(r.GetResources()) == 0 || slices.Contains(r.GetResources(), "*/*"),
		}
		for _, res := range r.GetResources() {
			p := resourcePattern{resource: res}
			if i := strings.IndexByte(res, '/'); i >= 0 {
				p = resourcePattern{resource: res[:i], subresource: res[i+1:]}
			}
			cr.resources = append(cr.resources, p)
		}
		if cr.anyOp && cr.anyGroup && cr.anyResource {
			return &matcher{everything: true}
		}
		m.rules = append(m.rules, cr)
	}
	return m
}

// covers reports whether any rule covers the request.
func (m *matcher) covers(op admissionv1.Operation, group, resource, subresource string) bool {
	if m.everything {
		return true
	}
	for i := range m.rules {
		if m.rules[i].covers(op, group, resource, subresource) {
			return true
		}
	}
	return false
}

// covers matches like Kubernetes' admission rule matcher: "*" as a
// resource covers every resource but no subresource, "pods/*" covers pods
// and all its subresources, "*/status" every status subresource.
func (r *rule) covers(op admissionv1.Operation, group, resource, subresource string) bool {
	if !r.anyOp && !slices.Contains(r.ops, op) {
		return false
	}
	if !r.anyGroup && !slices.Contains(r.groups, group) {
		return false
	}
	if r.anyResource {
		return true
	}
	for _, p := range r.resources {
		if (p.resource == "*" || p.resource == resource) && (p.subresource == "*" || p.subresource == subresource) {
			return true
		}
	}
	return false
}
