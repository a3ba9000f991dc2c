package authz

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// The cases of this file are kube-apiserver's RBAC authorizer tests
// (plugin/pkg/auth/authorizer/rbac/rbac_test.go, TestRuleMatches and
// TestAuthorizer), so that meridian's matching is held to the same table.

func resourceRequest(verb, group, resource, subresource, name string) Attributes {
	return Attributes{Verb: verb, ResourceRequest: true, APIGroup: group, Resource: resource, Subresource: subresource, Name: name}
}

func urlRequest(verb, path string) Attributes {
	return Attributes{Verb: verb, Path: path}
}

func rule(verbs, groups, resources []string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, APIGroups: groups, Resources: resources}
}

func urlRule(verbs, urls []string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, NonResourceURLs: urls}
}

// matchCase is a request and whether the rule under test allows it.
type matchCase struct {
	a    Attributes
	want bool
}

func s(v ...string) []string { return v }

// TestRuleMatches: verbs, groups, resources and subresources, resource
// names and non-resource URLs, with "*" and "prefix*".
func TestRuleMatches(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rule     rbacv1.PolicyRule
		requests []matchCase
	}{
		{"star verb, exact match other", rule(s("*"), s("group1"), s("resource1")), []matchCase{
			{resourceRequest("verb1", "group1", "resource1", "", ""), true},
			{resourceRequest("verb1", "group2", "resource1", "", ""), false},
			{resourceRequest("verb1", "group1", "resource2", "", ""), false},
			{resourceRequest("verb1", "group2", "resource2", "", ""), false},
			{resourceRequest("verb2", "group1", "resource1", "", ""), true},
			{resourceRequest("verb2", "group2", "resource1", "", ""), false},
			{resourceRequest("verb2", "group1", "resource2", "", ""), false},
			{resourceRequest("verb2", "group2", "resource2", "", ""), false},
		}},
		{"star group, exact match other", rule(s("verb1"), s("*"), s("resource1")), []matchCase{
			{resourceRequest("verb1", "group1", "resource1", "", ""), true},
			{resourceRequest("verb1", "group2", "resource1", "", ""), true},
			{resourceRequest("verb1", "group1", "resource2", "", ""), false},
			{resourceRequest("verb1", "group2", "resource2", "", ""), false},
			{resourceRequest("verb2", "group1", "resource1", "", ""), false},
			{resourceRequest("verb2", "group2", "resource1", "", ""), false},
		}},
		{"star resource, exact match other", rule(s("verb1"), s("group1"), s("*")), []matchCase{
			{resourceRequest("verb1", "group1", "resource1", "", ""), true},
			{resourceRequest("verb1", "group2", "resource1", "", ""), false},
			{resourceRequest("verb1", "group1", "resource2", "", ""), true},
			{resourceRequest("verb1", "group2", "resource2", "", ""), false},
			{resourceRequest("verb2", "group1", "resource1", "", ""), false},
			{resourceRequest("verb1", "group1", "resource1", "status", ""), true},
		}},
		{"tuple expansion", rule(s("verb1", "verb2"), s("group1", "group2"), s("resource1", "resource2")), []matchCase{
			{resourceRequest("verb1", "group1", "resource1", "", ""), true},
			{resourceRequest("verb1", "group2", "resource1", "", ""), true},
			{resourceRequest("verb1", "group1", "resource2", "", ""), true},
			{resourceRequest("verb1", "group2", "resource2", "", ""), true},
			{resourceRequest("verb2", "group1", "resource1", "", ""), true},
			{resourceRequest("verb2", "group2", "resource1", "", ""), true},
			{resourceRequest("verb2", "group1", "resource2", "", ""), true},
			{resourceRequest("verb2", "group2", "resource2", "", ""), true},
			{resourceRequest("verb3", "group1", "resource1", "", ""), false},
		}},
		{"subresource expansion", rule(s("*"), s("*"), s("resource1/subresource1")), []matchCase{
			{resourceRequest("verb1", "group1", "resource1", "subresource1", ""), true},
			{resourceRequest("verb1", "group2", "resource1", "subresource2", ""), false},
			{resourceRequest("verb1", "group1", "resource2", "subresource1", ""), false},
			{resourceRequest("verb1", "group2", "resource2", "subresource1", ""), false},
			{resourceRequest("verb2", "group1", "resource1", "subresource1", ""), true},
			{resourceRequest("verb2", "group1", "resource1", "", ""), false},
		}},
		{"star subresource", rule(s("get"), s(""), s("*/status")), []matchCase{
			{resourceRequest("get", "", "pods", "status", ""), true},
			{resourceRequest("get", "", "namespaces", "status", ""), true},
			{resourceRequest("get", "", "pods", "log", ""), false},
			{resourceRequest("get", "", "pods", "", ""), false},
		}},
		{"resource without its subresources", rule(s("*"), s("*"), s("pods")), []matchCase{
			{resourceRequest("get", "", "pods", "", ""), true},
			{resourceRequest("get", "", "pods", "status", ""), false},
		}},
		{"resource names", rbacv1.PolicyRule{Verbs: s("get", "list"), APIGroups: s(""), Resources: s("configmaps"), ResourceNames: s("a", "b")}, []matchCase{
			{resourceRequest("get", "", "configmaps", "", "a"), true},
			{resourceRequest("get", "", "configmaps", "", "b"), true},
			{resourceRequest("get", "", "configmaps", "", "c"), false},
			{resourceRequest("list", "", "configmaps", "", ""), false},
			{resourceRequest("list", "", "configmaps", "", "a"), true},
		}},
		{"star nonresource, exact match other", urlRule(s("verb1"), s("*")), []matchCase{
			{urlRequest("verb1", "/foo"), true},
			{urlRequest("verb1", "/foo/bar"), true},
			{urlRequest("verb1", "/foo/baz"), true},
			{urlRequest("verb1", "/foo/bar/one"), true},
			{urlRequest("verb1", "/foo/baz/one"), true},
			{urlRequest("verb2", "/foo"), false},
			{urlRequest("verb2", "/foo/bar"), false},
			{urlRequest("verb2", "/foo/baz/one"), false},
		}},
		{"star nonresource subpath", urlRule(s("verb1"), s("/foo/*")), []matchCase{
			{urlRequest("verb1", "/foo"), false},
			{urlRequest("verb1", "/foo/bar"), true},
			{urlRequest("verb1", "/foo/baz"), true},
			{urlRequest("verb1", "/foo/bar/one"), true},
			{urlRequest("verb1", "/foo/baz/one"), true},
			{urlRequest("verb1", "/notfoo"), false},
			{urlRequest("verb1", "/notfoo/bar"), false},
			{urlRequest("verb1", "/notfoo/baz"), false},
			{urlRequest("verb1", "/notfoo/bar/one"), false},
			{urlRequest("verb1", "/notfoo/baz/one"), false},
		}},
		{"star verb, exact nonresource", urlRule(s("*"), s("/foo", "/foo/bar/one")), []matchCase{
			{urlRequest("verb1", "/foo"), true},
			{urlRequest("verb1", "/foo/bar"), false},
			{urlRequest("verb1", "/foo/baz"), false},
			{urlRequest("verb1", "/foo/bar/one"), true},
			{urlRequest("verb1", "/foo/baz/one"), false},
			{urlRequest("verb2", "/foo"), true},
			{urlRequest("verb2", "/foo/bar"), false},
			{urlRequest("verb2", "/foo/bar/one"), true},
		}},
		{"resource rules do not match paths", rule(s("*"), s("*"), s("*")), []matchCase{
			{urlRequest("get", "/healthz"), false},
		}},
		{"path rules do not match resources", urlRule(s("*"), s("*")), []matchCase{
			{resourceRequest("get", "", "pods", "", ""), false},
		}},
	} {
		for _, c := range tc.requests {
			if got := ruleAllows(&tc.rule, &c.a); got != c.want {
				t.Errorf("%s: %+v: %v, want %v", tc.name, c.a, got, c.want)
			}
		}
	}
}

// TestCompactRules: the uncovered single-verb rules of an escalation
// error are merged by group, resource and name, as kube-apiserver shows
// them.
func TestCompactRules(t *testing.T) {
	got := compactRules([]rbacv1.PolicyRule{
		rule(s("get"), s(""), s("configmaps")),
		rule(s("list"), s(""), s("configmaps")),
		{Verbs: s("get"), APIGroups: s(""), Resources: s("secrets"), ResourceNames: s("a")},
		{Verbs: s("get"), APIGroups: s(""), Resources: s("secrets"), ResourceNames: s("b")},
		urlRule(s("get"), s("/healthz")),
	})
	var descriptions []string
	for _, r := range got {
		descriptions = append(descriptions, compactString(r))
	}
	want := []string{
		`{NonResourceURLs:["/healthz"], Verbs:["get"]}`,
		`{APIGroups:[""], Resources:["configmaps"], Verbs:["get" "list"]}`,
		`{APIGroups:[""], Resources:["secrets"], ResourceNames:["a"], Verbs:["get"]}`,
		`{APIGroups:[""], Resources:["secrets"], ResourceNames:["b"], Verbs:["get"]}`,
	}
	if len(descriptions) != len(want) {
		t.Fatalf("compacted to %q, want %q", descriptions, want)
	}
	for i := range want {
		if descriptions[i] != want[i] {
			t.Errorf("rule %d: %s, want %s", i, descriptions[i], want[i])
		}
	}
}
