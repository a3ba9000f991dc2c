package rbac

import (
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
)

// RuleAllows reports whether rule allows a request with attributes a, as
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
func RuleAllows(rule *rbacv1.PolicyRule, a *Attributes) bool {
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
