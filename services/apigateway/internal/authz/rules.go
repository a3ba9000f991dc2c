package authz

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
)

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
