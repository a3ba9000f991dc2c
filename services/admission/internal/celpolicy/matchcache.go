package celpolicy

import (
	"slices"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules"

	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/internal/admitattrs"
)

// matchCache holds, for one state of the policy set, which bindings' rules
// (the policy's matchConstraints and the binding's matchResources:
// resourceRules and excludeResourceRules) cover requests of each kind, so
// that a request's rules are matched once per kind of request and state,
// not once per request. Selectors depend on labels and are matched per
// request (matcher.matchesSelectors). A state is never modified once
// published and a new state starts with an empty cache, so a change of
// policies or bindings invalidates it; namespaces are not part of it.
type matchCache struct {
	// byName: a rule names resources, so the request's name is part of
	// the key.
	byName bool
	m      sync.Map     // matchKey → *candidates
	n      atomic.Int64 // entries in m, at most maxMatchCache
}

// maxMatchCache bounds a matchCache's entries; requests of further kinds
// are matched without caching.
const maxMatchCache = 4096

// matchKey is what the rules of a binding read from a request: its
// operation, resource, subresource, whether it is namespaced, and its
// name when a rule names resources.
type matchKey struct {
	op                                    admissionv1.Operation
	group, version, resource, subresource string
	namespaced                            bool
	name                                  string
}

// candidate is a binding whose rules cover a request: its entry in the
// state's validating or mutating list, and its index there.
type candidate struct{ entry, binding int }

// candidates are the bindings whose rules cover one kind of request, in
// evaluation order.
type candidates struct {
	validating, mutating []candidate
}

// candidates returns the bindings of st whose rules cover req.
func (st *state) candidates(req *admissionv1.AdmitRequest) *candidates {
	r := req.GetResource()
	k := matchKey{op: req.GetOperation(), group: r.GetGroup(), version: r.GetVersion(), resource: r.GetResource(),
		subresource: req.GetSubResource(), namespaced: req.GetNamespace() != ""}
	if st.matches.byName {
		k.name = req.GetName()
	}
	if c, ok := st.matches.m.Load(k); ok {
		return c.(*candidates)
	}
	c := st.matchRules(req)
	if st.matches.n.Load() < maxMatchCache {
		if _, loaded := st.matches.m.LoadOrStore(k, c); !loaded {
			st.matches.n.Add(1)
		}
	}
	return c
}

// matchRules finds the bindings whose rules cover req.
func (st *state) matchRules(req *admissionv1.AdmitRequest) *candidates {
	// The rules read the request's kind, resource, namespace, name,
	// subresource and operation: an attributes record of those alone.
	k, r := req.GetKind(), req.GetResource()
	a := admission.NewAttributesRecord(nil, nil,
		schema.GroupVersionKind{Group: k.GetGroup(), Version: k.GetVersion(), Kind: k.GetKind()},
		req.GetNamespace(), req.GetName(),
		schema.GroupVersionResource{Group: r.GetGroup(), Version: r.GetVersion(), Resource: r.GetResource()},
		req.GetSubResource(), admitattrs.Operation(req.GetOperation()), nil, false, nil)
	c := &candidates{}
	for i, e := range st.mutating {
		c.mutating = coveringBindings(c.mutating, i, e.policy.match, e.matchers, a)
	}
	for i, e := range st.validating {
		c.validating = coveringBindings(c.validating, i, e.policy.match, e.matchers, a)
	}
	return c
}

// coveringBindings appends to c the bindings (entry i, binding j) whose
// rules, and their policy's (policyMatch, nil for none), cover a.
func coveringBindings(c []candidate, i int, policyMatch *matcher, matchers []*matcher, a admission.Attributes) []candidate {
	if policyMatch != nil && !policyMatch.matchesRules(a) {
		return c
	}
	for j, m := range matchers {
		if m.matchesRules(a) {
			c = append(c, candidate{i, j})
		}
	}
	return c
}

// namesRules reports whether a rule of st names resources (see
// matchCache.byName).
func (st *state) namesRules() bool {
	for _, e := range st.validating {
		if anyNamesRules(e.policy.match, e.matchers) {
			return true
		}
	}
	for _, e := range st.mutating {
		if anyNamesRules(e.policy.match, e.matchers) {
			return true
		}
	}
	return false
}

// anyNamesRules reports whether the policy's rules (policyMatch, nil for
// none) or a binding's name resources.
func anyNamesRules(policyMatch *matcher, matchers []*matcher) bool {
	if policyMatch != nil && policyMatch.namesRules() {
		return true
	}
	return slices.ContainsFunc(matchers, (*matcher).namesRules)
}

// exemptKind reports whether k is one of the admission configuration
// kinds kube-apiserver exempts from admission policies
// (rules.IsExemptAdmissionConfigurationResource).
func exemptKind(k *admissionv1.GroupVersionKind) bool {
	if k.GetGroup() != "admissionregistration.k8s.io" {
		return false
	}
	return rules.IsExemptAdmissionConfigurationResource(admission.NewAttributesRecord(nil, nil,
		schema.GroupVersionKind{Group: k.GetGroup(), Version: k.GetVersion(), Kind: k.GetKind()}, "", "", schema.GroupVersionResource{}, "", "", nil, false, nil))
}
