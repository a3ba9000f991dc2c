package authz

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
)

// ruleAllows reports whether rule allows a request with attributes a, as
// kube-apiserver's RBAC authorizer matches them:
//
//   - verbs: the request's verb, or "*";
//   - resource requests: the request's API group or "*"; the resource
//     ("configmaps"), or "resource/subresource" for a subresource
//     ("namespaces/status"), or "*", or "*/subresource"; and, when the
//     rule lists resourceNames, the request's name among them (a request
//     without a name, a create or a list, never matches such a rule);
//   - non-resource requests: the path, "*", or a prefix ending in "*"
//     ("/apis/*" matches "/apis/v1" but not "/apis").
func ruleAllows(rule *rbacv1.PolicyRule, a *Attributes) bool {
	if !verbMatches(rule, a.Verb) {
		return false
	}
	if !a.ResourceRequest {
		return nonResourceURLMatches(rule, a.Path)
	}
	return apiGroupMatches(rule, a.APIGroup) && resourceMatches(rule, a.Resource, a.Subresource) && resourceNameMatches(rule, a.Name)
}

func verbMatches(rule *rbacv1.PolicyRule, verb string) bool {
	for _, v := range rule.Verbs {
		if v == rbacv1.VerbAll || v == verb {
			return true
		}
	}
	return false
}

func apiGroupMatches(rule *rbacv1.PolicyRule, group string) bool {
	for _, g := range rule.APIGroups {
		if g == rbacv1.APIGroupAll || g == group {
			return true
		}
	}
	return false
}

// resourceMatches compares without building "resource/subresource".
func resourceMatches(rule *rbacv1.PolicyRule, resource, subresource string) bool {
	for _, r := range rule.Resources {
		if r == rbacv1.ResourceAll {
			return true
		}
		if subresource == "" {
			if r == resource {
				return true
			}
			continue
		}
		// "resource/subresource" or "*/subresource".
		if len(r) == len(subresource)+1+len(resource) && strings.HasPrefix(r, resource) && r[len(resource)] == '/' && strings.HasSuffix(r, subresource) {
			return true
		}
		if len(r) == len(subresource)+2 && strings.HasPrefix(r, "*/") && strings.HasSuffix(r, subresource) {
			return true
		}
	}
	return false
}

func resourceNameMatches(rule *rbacv1.PolicyRule, name string) bool {
	if len(rule.ResourceNames) == 0 {
		return true
	}
	for _, n := range rule.ResourceNames {
		if n == name {
			return true
		}
	}
	return false
}

func nonResourceURLMatches(rule *rbacv1.PolicyRule, path string) bool {
	for _, u := range rule.NonResourceURLs {
		if u == rbacv1.NonResourceAll || u == path {
			return true
		}
		if strings.HasSuffix(u, "*") && strings.HasPrefix(path, strings.TrimRight(u, "*")) {
			return true
		}
	}
	return false
}

// compactString describes a rule as kube-apiserver's escalation errors
// do: {APIGroups:["*"], Resources:["*"], Verbs:["*"]}.
func compactString(r rbacv1.PolicyRule) string {
	var parts []string
	add := func(name string, values []string) {
		if len(values) > 0 {
			parts = append(parts, fmt.Sprintf("%s:%q", name, values))
		}
	}
	add("APIGroups", r.APIGroups)
	add("Resources", r.Resources)
	add("NonResourceURLs", r.NonResourceURLs)
	add("ResourceNames", r.ResourceNames)
	add("Verbs", r.Verbs)
	return "{" + strings.Join(parts, ", ") + "}"
}

// compactRules merges the rules that name one group, one resource and at
// most one resource name and differ only in their verbs, as
// kube-apiserver's CompactRules does for the uncovered rules of an
// escalation error (which Covers breaks down to single verbs).
func compactRules(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	type simple struct {
		group, resource, name string
		named                 bool
	}
	var out []rbacv1.PolicyRule
	merged := map[simple]*rbacv1.PolicyRule{}
	var order []simple
	for _, r := range rules {
		plain := rbacv1.PolicyRule{APIGroups: r.APIGroups, Resources: r.Resources, Verbs: r.Verbs, ResourceNames: r.ResourceNames}
		if len(r.ResourceNames) > 1 || len(r.NonResourceURLs) > 0 || len(r.APIGroups) != 1 || len(r.Resources) != 1 || !reflect.DeepEqual(plain, r) {
			out = append(out, r)
			continue
		}
		key := simple{group: r.APIGroups[0], resource: r.Resources[0]}
		if len(r.ResourceNames) == 1 {
			key.name, key.named = r.ResourceNames[0], true
		}
		if m, ok := merged[key]; ok {
			for _, v := range r.Verbs {
				if !slices.Contains(m.Verbs, v) {
					m.Verbs = append(m.Verbs, v)
				}
			}
			continue
		}
		merged[key] = r.DeepCopy()
		order = append(order, key)
	}
	for _, k := range order {
		out = append(out, *merged[k])
	}
	return out
}
