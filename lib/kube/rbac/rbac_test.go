package rbac_test

import (
	"context"
	"strings"
	"testing"

	"github.com/meridian-cp/meridian/lib/kube/rbac"
	"github.com/meridian-cp/meridian/lib/kube/rbac/rbactest"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// The cases of this file are kube-apiserver's RBAC authorizer tests
// (plugin/pkg/auth/authorizer/rbac/rbac_test.go, TestRuleMatches and
// TestAuthorizer), so that meridian's matching is held to the same table.

// matchCase is a request and whether the rule under test allows it.
type matchCase struct {
	a    rbac.Attributes
	want bool
}

// TestAuthorizer: bindings grant their roles' rules to the users, groups
// and service accounts they name, cluster-wide (ClusterRoleBindings) or in
// their namespace (RoleBindings), and nothing else; system:masters may do
// anything. The first cases are kube-apiserver's TestAuthorizer.
func TestAuthorizer(t *testing.T) {
	for _, tc := range []struct {
		name       string
		objs       []runtime.Object
		pass, fail []rbac.Attributes
	}{
		{
			name: "cluster role bound in one namespace",
			objs: []runtime.Object{
				rbactest.ClusterRole("admin", rbactest.Rule(rbactest.S("*"), rbactest.S("*"), rbactest.S("*"))),
				rbactest.RoleBinding("ns1", "b", "ClusterRole", "admin", "User:admin", "Group:admins"),
			},
			pass: []rbac.Attributes{
				rbactest.In(rbactest.ResourceRequest("get", "", "Pods", "", ""), rbactest.Who("admin"), "ns1"),
				rbactest.In(rbactest.ResourceRequest("watch", "", "Pods", "", ""), rbactest.Who("admin"), "ns1"),
				rbactest.In(rbactest.ResourceRequest("watch", "", "Foobar", "", ""), rbactest.Who("admin", "group1"), "ns1"),
				rbactest.In(rbactest.ResourceRequest("watch", "", "Foobar", "", ""), rbactest.Who("joe", "admins"), "ns1"),
				rbactest.In(rbactest.ResourceRequest("watch", "", "Foobar", "", ""), rbactest.Who("joe", "group1", "admins"), "ns1"),
			},
			fail: []rbac.Attributes{
				rbactest.In(rbactest.ResourceRequest("GET", "", "Pods", "", ""), rbactest.Who("admin"), "ns2"),
				rbactest.In(rbactest.ResourceRequest("GET", "", "Nodes", "", ""), rbactest.Who("admin"), ""),
				rbactest.In(rbactest.ResourceRequest("GET", "", "Pods", "", ""), rbactest.Who("admin", "admins"), "ns2"),
				rbactest.In(rbactest.ResourceRequest("GET", "", "Nodes", "", ""), rbactest.Who("admin", "admins"), ""),
			},
		},
		{
			name: "non-resource URLs",
			objs: []runtime.Object{
				rbactest.ClusterRole("non-resource-url-getter", rbactest.URLRule(rbactest.S("get"), rbactest.S("/apis"))),
				rbactest.ClusterRole("non-resource-url", rbactest.URLRule(rbactest.S("*"), rbactest.S("/apis"))),
				rbactest.ClusterRole("non-resource-url-prefix", rbactest.URLRule(rbactest.S("get"), rbactest.S("/apis/*"))),
				rbactest.ClusterRoleBinding("b1", "non-resource-url-getter", "User:foo", "Group:bar"),
				rbactest.ClusterRoleBinding("b2", "non-resource-url", "User:admin", "Group:admin"),
				rbactest.ClusterRoleBinding("b3", "non-resource-url-prefix", "User:prefixed", "Group:prefixed"),
			},
			pass: []rbac.Attributes{
				rbactest.In(rbactest.URLRequest("get", "/apis"), rbactest.Who("foo"), ""),
				rbactest.In(rbactest.URLRequest("get", "/apis"), rbactest.Who("", "bar"), ""),
				rbactest.In(rbactest.URLRequest("get", "/apis"), rbactest.Who("admin"), ""),
				rbactest.In(rbactest.URLRequest("get", "/apis"), rbactest.Who("", "admin"), ""),
				rbactest.In(rbactest.URLRequest("watch", "/apis"), rbactest.Who("admin"), ""),
				rbactest.In(rbactest.URLRequest("watch", "/apis"), rbactest.Who("", "admin"), ""),
				rbactest.In(rbactest.URLRequest("get", "/apis/v1"), rbactest.Who("prefixed"), ""),
				rbactest.In(rbactest.URLRequest("get", "/apis/v1"), rbactest.Who("", "prefixed"), ""),
				rbactest.In(rbactest.URLRequest("get", "/apis/v1/foobar"), rbactest.Who("prefixed"), ""),
				rbactest.In(rbactest.URLRequest("get", "/apis/v1/foorbar"), rbactest.Who("", "prefixed"), ""),
			},
			fail: []rbac.Attributes{
				rbactest.In(rbactest.URLRequest("watch", "/apis"), rbactest.Who("foo"), ""),
				rbactest.In(rbactest.URLRequest("watch", "/apis"), rbactest.Who("", "bar"), ""),
				rbactest.In(rbactest.URLRequest("get", "/api/v1"), rbactest.Who("foo"), ""),
				rbactest.In(rbactest.URLRequest("get", "/api/v1"), rbactest.Who("", "bar"), ""),
				rbactest.In(rbactest.URLRequest("get", "/api/v1"), rbactest.Who("admin"), ""),
				rbactest.In(rbactest.URLRequest("get", "/api/v1"), rbactest.Who("", "admin"), ""),
				rbactest.In(rbactest.URLRequest("get", "/api/v1"), rbactest.Who("prefixed"), ""),
				rbactest.In(rbactest.URLRequest("get", "/api/v1"), rbactest.Who("", "prefixed"), ""),
			},
		},
		{
			name: "a resource rule leaves out its subresources",
			objs: []runtime.Object{
				rbactest.ClusterRole("admin", rbactest.Rule(rbactest.S("*"), rbactest.S("*"), rbactest.S("pods"))),
				rbactest.RoleBinding("ns1", "b", "ClusterRole", "admin", "User:admin", "Group:admins"),
			},
			pass: []rbac.Attributes{rbactest.In(rbactest.ResourceRequest("get", "", "pods", "", ""), rbactest.Who("admin"), "ns1")},
			fail: []rbac.Attributes{rbactest.In(rbactest.ResourceRequest("get", "", "pods", "status", ""), rbactest.Who("admin"), "ns1")},
		},
		{
			name: "a subresource rule leaves out its resource",
			objs: []runtime.Object{
				rbactest.ClusterRole("admin", rbactest.Rule(rbactest.S("*"), rbactest.S("*"), rbactest.S("pods/status"))),
				rbactest.RoleBinding("ns1", "b", "ClusterRole", "admin", "User:admin", "Group:admins"),
			},
			pass: []rbac.Attributes{rbactest.In(rbactest.ResourceRequest("get", "", "pods", "status", ""), rbactest.Who("admin"), "ns1")},
			fail: []rbac.Attributes{rbactest.In(rbactest.ResourceRequest("get", "", "pods", "", ""), rbactest.Who("admin"), "ns1")},
		},
		{
			name: "roles in their namespace only",
			objs: []runtime.Object{
				rbactest.Role("ns1", "reader", rbactest.Rule(rbactest.S("get", "list"), rbactest.S(""), rbactest.S("configmaps"))),
				rbactest.Role("ns2", "reader", rbactest.Rule(rbactest.S("*"), rbactest.S("*"), rbactest.S("*"))),
				rbactest.RoleBinding("ns1", "b", "Role", "reader", "User:alice"),
			},
			pass: []rbac.Attributes{
				rbactest.In(rbactest.ResourceRequest("get", "", "configmaps", "", "x"), rbactest.Who("alice"), "ns1"),
				rbactest.In(rbactest.ResourceRequest("list", "", "configmaps", "", ""), rbactest.Who("alice"), "ns1"),
			},
			fail: []rbac.Attributes{
				rbactest.In(rbactest.ResourceRequest("create", "", "configmaps", "", ""), rbactest.Who("alice"), "ns1"),
				rbactest.In(rbactest.ResourceRequest("get", "", "configmaps", "", "x"), rbactest.Who("alice"), "ns2"),
				rbactest.In(rbactest.ResourceRequest("list", "", "configmaps", "", ""), rbactest.Who("alice"), ""),
				rbactest.In(rbactest.ResourceRequest("get", "", "configmaps", "", "x"), rbactest.Who("bob"), "ns1"),
			},
		},
		{
			name: "service accounts",
			objs: []runtime.Object{
				rbactest.ClusterRole("view", rbactest.Rule(rbactest.S("get"), rbactest.S(""), rbactest.S("configmaps"))),
				rbactest.RoleBinding("ns1", "local", "ClusterRole", "view", "ServiceAccount:builder"),
				rbactest.RoleBinding("ns1", "other", "ClusterRole", "view", "ServiceAccount:ns3/deployer"),
				rbactest.ClusterRoleBinding("no-namespace", "view", "ServiceAccount:nobody"),
				rbactest.ClusterRoleBinding("everywhere", "view", "ServiceAccount:ns4/robot"),
			},
			pass: []rbac.Attributes{
				rbactest.In(rbactest.ResourceRequest("get", "", "configmaps", "", "x"), rbactest.Who("system:serviceaccount:ns1:builder"), "ns1"),
				rbactest.In(rbactest.ResourceRequest("get", "", "configmaps", "", "x"), rbactest.Who("system:serviceaccount:ns3:deployer"), "ns1"),
				rbactest.In(rbactest.ResourceRequest("get", "", "configmaps", "", "x"), rbactest.Who("system:serviceaccount:ns4:robot"), "ns9"),
			},
			fail: []rbac.Attributes{
				rbactest.In(rbactest.ResourceRequest("get", "", "configmaps", "", "x"), rbactest.Who("system:serviceaccount:ns2:builder"), "ns1"),
				rbactest.In(rbactest.ResourceRequest("get", "", "configmaps", "", "x"), rbactest.Who("system:serviceaccount:ns1:builder"), "ns2"),
				rbactest.In(rbactest.ResourceRequest("get", "", "configmaps", "", "x"), rbactest.Who("builder"), "ns1"),
				rbactest.In(rbactest.ResourceRequest("get", "", "configmaps", "", "x"), rbactest.Who("system:serviceaccount::nobody"), ""),
				rbactest.In(rbactest.ResourceRequest("get", "", "configmaps", "", "x"), rbactest.Who("system:serviceaccount:ns1:nobody"), "ns1"),
			},
		},
		{
			name: "bindings of roles that do not exist grant nothing",
			objs: []runtime.Object{
				rbactest.RoleBinding("ns1", "b", "Role", "missing", "User:alice"),
				rbactest.ClusterRoleBinding("c", "missing", "User:alice"),
			},
			fail: []rbac.Attributes{rbactest.In(rbactest.ResourceRequest("get", "", "configmaps", "", "x"), rbactest.Who("alice"), "ns1")},
		},
		{
			name: "system:masters without any binding",
			pass: []rbac.Attributes{
				rbactest.In(rbactest.ResourceRequest("delete", "", "namespaces", "", "x"), rbactest.Who("root", "system:masters"), "x"),
				rbactest.In(rbactest.URLRequest("get", "/metrics"), rbactest.Who("root", "system:masters"), ""),
			},
			fail: []rbac.Attributes{rbactest.In(rbactest.URLRequest("get", "/metrics"), rbactest.Who("root", "system:authenticated"), "")},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rbac.NewStatic(tc.objs...)
			for _, a := range tc.pass {
				if ok, reason := r.Allowed(t.Context(), a); !ok {
					t.Errorf("refused %+v: %s", a, reason)
				}
				if d, _, err := r.Authorize(t.Context(), a.Record()); d != authorizer.DecisionAllow || err != nil {
					t.Errorf("Authorize refused %+v: %v %v", a, d, err)
				}
			}
			for _, a := range tc.fail {
				if ok, _ := r.Allowed(t.Context(), a); ok {
					t.Errorf("allowed %+v", a)
				}
				if d, _, _ := r.Authorize(t.Context(), a.Record()); d == authorizer.DecisionAllow {
					t.Errorf("Authorize allowed %+v", a)
				}
			}
		})
	}
}

// TestReasons: Authorize names the binding and the subject that allowed a
// request, and a denial names the roles that could not be found, in
// kube-apiserver's words.
func TestReasons(t *testing.T) {
	r := rbac.NewStatic(
		rbactest.ClusterRole("view", rbactest.Rule(rbactest.S("get"), rbactest.S(""), rbactest.S("configmaps"))),
		rbactest.ClusterRoleBinding("readers", "view", "User:bob", "Group:dev"),
		rbactest.RoleBinding("ns1", "sa", "ClusterRole", "view", "ServiceAccount:builder"),
		rbactest.RoleBinding("ns2", "broken", "Role", "gone", "User:carol"),
		rbactest.ClusterRoleBinding("broken", "absent", "User:carol"),
	)
	ctx := context.Background()
	for _, tc := range []struct {
		a        rbac.Attributes
		decision authorizer.Decision
		reason   string
	}{
		{rbactest.In(rbactest.ResourceRequest("get", "", "configmaps", "", "x"), rbactest.Who("alice", "dev"), "ns1"), authorizer.DecisionAllow,
			`RBAC: allowed by ClusterRoleBinding "readers" of ClusterRole "view" to Group "dev"`},
		{rbactest.In(rbactest.ResourceRequest("get", "", "configmaps", "", "x"), rbactest.Who("bob"), ""), authorizer.DecisionAllow,
			`RBAC: allowed by ClusterRoleBinding "readers" of ClusterRole "view" to User "bob"`},
		{rbactest.In(rbactest.ResourceRequest("get", "", "configmaps", "", "x"), rbactest.Who("system:serviceaccount:ns1:builder"), "ns1"), authorizer.DecisionAllow,
			`RBAC: allowed by RoleBinding "sa/ns1" of ClusterRole "view" to ServiceAccount "builder/ns1"`},
		{rbactest.In(rbactest.ResourceRequest("get", "", "configmaps", "", "x"), rbactest.Who("root", "system:masters"), "ns1"), authorizer.DecisionAllow, ""},
		{rbactest.In(rbactest.ResourceRequest("get", "", "configmaps", "", "x"), rbactest.Who("dave"), "ns1"), authorizer.DecisionNoOpinion, ""},
		{rbactest.In(rbactest.ResourceRequest("get", "", "configmaps", "", "x"), rbactest.Who("carol"), "ns2"), authorizer.DecisionNoOpinion,
			`RBAC: [clusterrole.rbac.authorization.k8s.io "absent" not found, role.rbac.authorization.k8s.io "gone" not found]`},
	} {
		d, reason, err := r.Authorize(ctx, tc.a.Record())
		if d != tc.decision || reason != tc.reason || err != nil {
			t.Errorf("%s in %q: %v %q %v, want %v %q", tc.a.User.Name, tc.a.Namespace, d, reason, err, tc.decision, tc.reason)
		}
	}
	if _, reason := r.Allowed(ctx, rbactest.In(rbactest.ResourceRequest("get", "", "configmaps", "", "x"), rbactest.Who("carol"), "ns2")); !strings.Contains(reason, `"gone" not found`) {
		t.Errorf("Allowed's denial reason: %q", reason)
	}
}

// TestRulesFor: the rules of every binding naming the user, cluster-wide
// and in the namespace, each binding once, split into resource and
// non-resource rules as SelfSubjectRulesReview reports them.
func TestRulesFor(t *testing.T) {
	r := rbac.NewStatic(
		rbactest.ClusterRole("view", rbactest.Rule(rbactest.S("get"), rbactest.S(""), rbactest.S("configmaps"))),
		rbactest.ClusterRole("discovery", rbactest.URLRule(rbactest.S("get"), rbactest.S("/api", "/api/*"))),
		rbactest.Role("ns1", "edit", rbactest.Rule(rbactest.S("create"), rbactest.S(""), rbactest.S("configmaps"))),
		rbactest.ClusterRoleBinding("readers", "view", "User:alice", "Group:dev"),
		rbactest.ClusterRoleBinding("disco", "discovery", "Group:system:authenticated"),
		rbactest.RoleBinding("ns1", "editors", "Role", "edit", "Group:dev"),
		rbactest.RoleBinding("ns2", "editors", "Role", "edit", "Group:dev"),
	)
	u := &user.DefaultInfo{Name: "alice", Groups: []string{"dev", "system:authenticated"}}
	res, nonRes, incomplete, err := r.RulesFor(t.Context(), u, "ns1")
	if err != nil || incomplete || len(res) != 2 || len(nonRes) != 1 {
		t.Fatalf("RulesFor: %d resource rules, %d non-resource rules, %v, %v", len(res), len(nonRes), incomplete, err)
	}
	if got := nonRes[0].GetNonResourceURLs(); len(got) != 2 || got[0] != "/api" {
		t.Errorf("non-resource rule: %v", got)
	}
	_, _, _, err = r.RulesFor(t.Context(), u, "ns2")
	if err == nil || !strings.Contains(err.Error(), `role.rbac.authorization.k8s.io "edit" not found`) {
		t.Errorf("a binding of a missing role: %v", err)
	}
	res, _, _, _ = r.RulesFor(t.Context(), u, "")
	if len(res) != 1 {
		t.Errorf("cluster-wide: %d resource rules, want 1", len(res))
	}
}

// TestRuleMatches: verbs, groups, resources and subresources, resource
// names and non-resource URLs, with "*" and "prefix*".
func TestRuleMatches(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rule     rbacv1.PolicyRule
		requests []matchCase
	}{
		{"star verb, exact match other", rbactest.Rule(rbactest.S("*"), rbactest.S("group1"), rbactest.S("resource1")), []matchCase{
			{rbactest.ResourceRequest("verb1", "group1", "resource1", "", ""), true},
			{rbactest.ResourceRequest("verb1", "group2", "resource1", "", ""), false},
			{rbactest.ResourceRequest("verb1", "group1", "resource2", "", ""), false},
			{rbactest.ResourceRequest("verb1", "group2", "resource2", "", ""), false},
			{rbactest.ResourceRequest("verb2", "group1", "resource1", "", ""), true},
			{rbactest.ResourceRequest("verb2", "group2", "resource1", "", ""), false},
			{rbactest.ResourceRequest("verb2", "group1", "resource2", "", ""), false},
			{rbactest.ResourceRequest("verb2", "group2", "resource2", "", ""), false},
		}},
		{"star group, exact match other", rbactest.Rule(rbactest.S("verb1"), rbactest.S("*"), rbactest.S("resource1")), []matchCase{
			{rbactest.ResourceRequest("verb1", "group1", "resource1", "", ""), true},
			{rbactest.ResourceRequest("verb1", "group2", "resource1", "", ""), true},
			{rbactest.ResourceRequest("verb1", "group1", "resource2", "", ""), false},
			{rbactest.ResourceRequest("verb1", "group2", "resource2", "", ""), false},
			{rbactest.ResourceRequest("verb2", "group1", "resource1", "", ""), false},
			{rbactest.ResourceRequest("verb2", "group2", "resource1", "", ""), false},
		}},
		{"star resource, exact match other", rbactest.Rule(rbactest.S("verb1"), rbactest.S("group1"), rbactest.S("*")), []matchCase{
			{rbactest.ResourceRequest("verb1", "group1", "resource1", "", ""), true},
			{rbactest.ResourceRequest("verb1", "group2", "resource1", "", ""), false},
			{rbactest.ResourceRequest("verb1", "group1", "resource2", "", ""), true},
			{rbactest.ResourceRequest("verb1", "group2", "resource2", "", ""), false},
			{rbactest.ResourceRequest("verb2", "group1", "resource1", "", ""), false},
			{rbactest.ResourceRequest("verb1", "group1", "resource1", "status", ""), true},
		}},
		{"tuple expansion", rbactest.Rule(rbactest.S("verb1", "verb2"), rbactest.S("group1", "group2"), rbactest.S("resource1", "resource2")), []matchCase{
			{rbactest.ResourceRequest("verb1", "group1", "resource1", "", ""), true},
			{rbactest.ResourceRequest("verb1", "group2", "resource1", "", ""), true},
			{rbactest.ResourceRequest("verb1", "group1", "resource2", "", ""), true},
			{rbactest.ResourceRequest("verb1", "group2", "resource2", "", ""), true},
			{rbactest.ResourceRequest("verb2", "group1", "resource1", "", ""), true},
			{rbactest.ResourceRequest("verb2", "group2", "resource1", "", ""), true},
			{rbactest.ResourceRequest("verb2", "group1", "resource2", "", ""), true},
			{rbactest.ResourceRequest("verb2", "group2", "resource2", "", ""), true},
			{rbactest.ResourceRequest("verb3", "group1", "resource1", "", ""), false},
		}},
		{"subresource expansion", rbactest.Rule(rbactest.S("*"), rbactest.S("*"), rbactest.S("resource1/subresource1")), []matchCase{
			{rbactest.ResourceRequest("verb1", "group1", "resource1", "subresource1", ""), true},
			{rbactest.ResourceRequest("verb1", "group2", "resource1", "subresource2", ""), false},
			{rbactest.ResourceRequest("verb1", "group1", "resource2", "subresource1", ""), false},
			{rbactest.ResourceRequest("verb1", "group2", "resource2", "subresource1", ""), false},
			{rbactest.ResourceRequest("verb2", "group1", "resource1", "subresource1", ""), true},
			{rbactest.ResourceRequest("verb2", "group1", "resource1", "", ""), false},
		}},
		{"star subresource", rbactest.Rule(rbactest.S("get"), rbactest.S(""), rbactest.S("*/status")), []matchCase{
			{rbactest.ResourceRequest("get", "", "pods", "status", ""), true},
			{rbactest.ResourceRequest("get", "", "namespaces", "status", ""), true},
			{rbactest.ResourceRequest("get", "", "pods", "log", ""), false},
			{rbactest.ResourceRequest("get", "", "pods", "", ""), false},
		}},
		{"resource without its subresources", rbactest.Rule(rbactest.S("*"), rbactest.S("*"), rbactest.S("pods")), []matchCase{
			{rbactest.ResourceRequest("get", "", "pods", "", ""), true},
			{rbactest.ResourceRequest("get", "", "pods", "status", ""), false},
		}},
		{"resource names", rbacv1.PolicyRule{Verbs: rbactest.S("get", "list"), APIGroups: rbactest.S(""), Resources: rbactest.S("configmaps"), ResourceNames: rbactest.S("a", "b")}, []matchCase{
			{rbactest.ResourceRequest("get", "", "configmaps", "", "a"), true},
			{rbactest.ResourceRequest("get", "", "configmaps", "", "b"), true},
			{rbactest.ResourceRequest("get", "", "configmaps", "", "c"), false},
			{rbactest.ResourceRequest("list", "", "configmaps", "", ""), false},
			{rbactest.ResourceRequest("list", "", "configmaps", "", "a"), true},
		}},
		{"star nonresource, exact match other", rbactest.URLRule(rbactest.S("verb1"), rbactest.S("*")), []matchCase{
			{rbactest.URLRequest("verb1", "/foo"), true},
			{rbactest.URLRequest("verb1", "/foo/bar"), true},
			{rbactest.URLRequest("verb1", "/foo/baz"), true},
			{rbactest.URLRequest("verb1", "/foo/bar/one"), true},
			{rbactest.URLRequest("verb1", "/foo/baz/one"), true},
			{rbactest.URLRequest("verb2", "/foo"), false},
			{rbactest.URLRequest("verb2", "/foo/bar"), false},
			{rbactest.URLRequest("verb2", "/foo/baz/one"), false},
		}},
		{"star nonresource subpath", rbactest.URLRule(rbactest.S("verb1"), rbactest.S("/foo/*")), []matchCase{
			{rbactest.URLRequest("verb1", "/foo"), false},
			{rbactest.URLRequest("verb1", "/foo/bar"), true},
			{rbactest.URLRequest("verb1", "/foo/baz"), true},
			{rbactest.URLRequest("verb1", "/foo/bar/one"), true},
			{rbactest.URLRequest("verb1", "/foo/baz/one"), true},
			{rbactest.URLRequest("verb1", "/notfoo"), false},
			{rbactest.URLRequest("verb1", "/notfoo/bar"), false},
			{rbactest.URLRequest("verb1", "/notfoo/baz"), false},
			{rbactest.URLRequest("verb1", "/notfoo/bar/one"), false},
			{rbactest.URLRequest("verb1", "/notfoo/baz/one"), false},
		}},
		{"star verb, exact nonresource", rbactest.URLRule(rbactest.S("*"), rbactest.S("/foo", "/foo/bar/one")), []matchCase{
			{rbactest.URLRequest("verb1", "/foo"), true},
			{rbactest.URLRequest("verb1", "/foo/bar"), false},
			{rbactest.URLRequest("verb1", "/foo/baz"), false},
			{rbactest.URLRequest("verb1", "/foo/bar/one"), true},
			{rbactest.URLRequest("verb1", "/foo/baz/one"), false},
			{rbactest.URLRequest("verb2", "/foo"), true},
			{rbactest.URLRequest("verb2", "/foo/bar"), false},
			{rbactest.URLRequest("verb2", "/foo/bar/one"), true},
		}},
		{"resource rules do not match paths", rbactest.Rule(rbactest.S("*"), rbactest.S("*"), rbactest.S("*")), []matchCase{
			{rbactest.URLRequest("get", "/healthz"), false},
		}},
		{"path rules do not match resources", rbactest.URLRule(rbactest.S("*"), rbactest.S("*")), []matchCase{
			{rbactest.ResourceRequest("get", "", "pods", "", ""), false},
		}},
	} {
		for _, c := range tc.requests {
			if got := rbac.RuleAllows(&tc.rule, &c.a); got != c.want {
				t.Errorf("%s: %+v: %v, want %v", tc.name, c.a, got, c.want)
			}
		}
	}
}
