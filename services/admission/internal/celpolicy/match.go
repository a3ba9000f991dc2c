package celpolicy

import (
	"fmt"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules"
)

// matcher is a compiled MatchResources: a policy's matchConstraints or a
// binding's matchResources.
type matcher struct {
	rules, exclude []admissionregistrationv1.NamedRuleWithOperations
	nsSel, objSel  labels.Selector
}

// newMatcher compiles m (nil matches everything: a binding without
// matchResources).
func newMatcher(m *admissionregistrationv1.MatchResources) (*matcher, error) {
	if m == nil {
		return &matcher{nsSel: labels.Everything(), objSel: labels.Everything()}, nil
	}
	mt := &matcher{rules: m.ResourceRules, exclude: m.ExcludeResourceRules, nsSel: labels.Everything(), objSel: labels.Everything()}
	equivalent := m.MatchPolicy == nil || *m.MatchPolicy == admissionregistrationv1.Equivalent
	if equivalent {
		// meridian serves each resource at one version, so every version a
		// rule names of a served group/resource is equivalent to it.
		mt.rules = anyVersion(mt.rules)
		mt.exclude = anyVersion(mt.exclude)
	}
	var err error
	if s := m.NamespaceSelector; s != nil {
		if mt.nsSel, err = metav1.LabelSelectorAsSelector(s); err != nil {
			return nil, fmt.Errorf("namespaceSelector: %w", err)
		}
	}
	if s := m.ObjectSelector; s != nil {
		if mt.objSel, err = metav1.LabelSelectorAsSelector(s); err != nil {
			return nil, fmt.Errorf("objectSelector: %w", err)
		}
	}
	return mt, nil
}

func anyVersion(rs []admissionregistrationv1.NamedRuleWithOperations) []admissionregistrationv1.NamedRuleWithOperations {
	out := make([]admissionregistrationv1.NamedRuleWithOperations, len(rs))
	for i, r := range rs {
		r.APIVersions = []string{"*"}
		out[i] = r
	}
	return out
}

// matches reports whether the request a matches: a rule covers it, no
// exclude rule does, its namespace's labels (ns nil: cluster-scoped, or
// a namespace not known yet, which has no labels) match the namespace
// selector, and its object's or old object's labels the object selector.
func (m *matcher) matches(a *attributes, ns *corev1.Namespace) bool {
	return m.matchesRules(a) && m.matchesSelectors(a, ns)
}

// matchesRules reports whether a rule covers the request a and no
// exclude rule does: what the request's operation, resource, namespace
// and name decide, without its objects.
func (m *matcher) matchesRules(a admission.Attributes) bool {
	if len(m.rules) > 0 && !matchesAny(m.rules, a) {
		return false
	}
	return !matchesAny(m.exclude, a)
}

// namesRules reports whether a rule or exclude rule names resources:
// then whether it covers a request depends on the request's name.
func (m *matcher) namesRules() bool {
	for _, rs := range [][]admissionregistrationv1.NamedRuleWithOperations{m.rules, m.exclude} {
		for _, r := range rs {
			if len(r.ResourceNames) > 0 {
				return true
			}
		}
	}
	return false
}

// matchesSelectors reports whether the request a's namespace and
// object labels match the selectors (see matches).
func (m *matcher) matchesSelectors(a *attributes, ns *corev1.Namespace) bool {
	if !m.objSel.Empty() {
		nl, ol := a.objectLabels()
		if !m.objSel.Matches(labels.Set(nl)) && !m.objSel.Matches(labels.Set(ol)) {
			return false
		}
	}
	if !m.nsSel.Empty() {
		switch {
		case a.GetResource().Resource == "namespaces" && a.GetResource().Group == "" && a.GetSubresource() == "":
			nl, ol := a.objectLabels()
			if !m.nsSel.Matches(labels.Set(nl)) && !m.nsSel.Matches(labels.Set(ol)) {
				return false
			}
		case a.GetNamespace() == "":
			// Cluster-scoped: namespace selectors do not apply.
		case ns == nil:
			return m.nsSel.Matches(labels.Set(nil))
		default:
			return m.nsSel.Matches(labels.Set(ns.Labels))
		}
	}
	return true
}

func matchesAny(rs []admissionregistrationv1.NamedRuleWithOperations, a admission.Attributes) bool {
	for _, r := range rs {
		if len(r.ResourceNames) > 0 && !slices.Contains(r.ResourceNames, a.GetName()) {
			continue
		}
		if (&rules.Matcher{Rule: r.RuleWithOperations, Attr: a}).Matches() {
			return true
		}
	}
	return false
}
