package authz

import (
	"context"
	"strings"
	"testing"

	"github.com/meridian-cp/meridian/lib/identity"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

func clusterRole(name string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
}

func role(namespace, name string, rules ...rbacv1.PolicyRule) *rbacv1.Role {
	return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Rules: rules}
}

// subjects reads "User:alice", "Group:dev", "ServiceAccount:ns/name" (or
// "ServiceAccount:name", namespace unset).
func subjects(specs ...string) []rbacv1.Subject {
	var out []rbacv1.Subject
	for _, spec := range specs {
		kind, name, _ := strings.Cut(spec, ":")
		sub := rbacv1.Subject{Kind: kind, Name: name}
		if kind == rbacv1.ServiceAccountKind {
			if ns, n, ok := strings.Cut(name, "/"); ok {
				sub.Namespace, sub.Name = ns, n
			}
		} else {
			sub.APIGroup = rbacv1.GroupName
		}
		out = append(out, sub)
	}
	return out
}

func clusterRoleBinding(name, roleName string, subs ...string) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roleName}, Subjects: subjects(subs...)}
}

func roleBinding(namespace, name, kind, roleName string, subs ...string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: roleName}, Subjects: subjects(subs...)}
}

func who(name string, groups ...string) identity.User {
	return identity.User{Name: name, Groups: groups}
}

func in(a Attributes, u identity.User, namespace string) Attributes {
	a.User, a.Namespace = u, namespace
	return a
}

// TestAuthorizer: bindings grant their roles' rules to the users, groups
// and service accounts they name, cluster-wide (ClusterRoleBindings) or in
// their namespace (RoleBindings), and nothing else; system:masters may do
// anything. The first cases are kube-apiserver's TestAuthorizer.
func TestAuthorizer(t *testing.T) {
	for _, tc := range []struct {
		name       string
		objs       []runtime.Object
		pass, fail []Attributes
	}{
		{
			name: "cluster role bound in one namespace",
			objs: []runtime.Object{
				clusterRole("admin", rule(s("*"), s("*"), s("*"))),
				roleBinding("ns1", "b", "ClusterRole", "admin", "User:admin", "Group:admins"),
			},
			pass: []Attributes{
				in(resourceRequest("get", "", "Pods", "", ""), who("admin"), "ns1"),
				in(resourceRequest("watch", "", "Pods", "", ""), who("admin"), "ns1"),
				in(resourceRequest("watch", "", "Foobar", "", ""), who("admin", "group1"), "ns1"),
				in(resourceRequest("watch", "", "Foobar", "", ""), who("joe", "admins"), "ns1"),
				in(resourceRequest("watch", "", "Foobar", "", ""), who("joe", "group1", "admins"), "ns1"),
			},
			fail: []Attributes{
				in(resourceRequest("GET", "", "Pods", "", ""), who("admin"), "ns2"),
				in(resourceRequest("GET", "", "Nodes", "", ""), who("admin"), ""),
				in(resourceRequest("GET", "", "Pods", "", ""), who("admin", "admins"), "ns2"),
				in(resourceRequest("GET", "", "Nodes", "", ""), who("admin", "admins"), ""),
			},
		},
		{
			name: "non-resource URLs",
			objs: []runtime.Object{
				clusterRole("non-resource-url-getter", urlRule(s("get"), s("/apis"))),
				clusterRole("non-resource-url", urlRule(s("*"), s("/apis"))),
				clusterRole("non-resource-url-prefix", urlRule(s("get"), s("/apis/*"))),
				clusterRoleBinding("b1", "non-resource-url-getter", "User:foo", "Group:bar"),
				clusterRoleBinding("b2", "non-resource-url", "User:admin", "Group:admin"),
				clusterRoleBinding("b3", "non-resource-url-prefix", "User:prefixed", "Group:prefixed"),
			},
			pass: []Attributes{
				in(urlRequest("get", "/apis"), who("foo"), ""),
				in(urlRequest("get", "/apis"), who("", "bar"), ""),
				in(urlRequest("get", "/apis"), who("admin"), ""),
				in(urlRequest("get", "/apis"), who("", "admin"), ""),
				in(urlRequest("watch", "/apis"), who("admin"), ""),
				in(urlRequest("watch", "/apis"), who("", "admin"), ""),
				in(urlRequest("get", "/apis/v1"), who("prefixed"), ""),
				in(urlRequest("get", "/apis/v1"), who("", "prefixed"), ""),
				in(urlRequest("get", "/apis/v1/foobar"), who("prefixed"), ""),
				in(urlRequest("get", "/apis/v1/foorbar"), who("", "prefixed"), ""),
			},
			fail: []Attributes{
				in(urlRequest("watch", "/apis"), who("foo"), ""),
				in(urlRequest("watch", "/apis"), who("", "bar"), ""),
				in(urlRequest("get", "/api/v1"), who("foo"), ""),
				in(urlRequest("get", "/api/v1"), who("", "bar"), ""),
				in(urlRequest("get", "/api/v1"), who("admin"), ""),
				in(urlRequest("get", "/api/v1"), who("", "admin"), ""),
				in(urlRequest("get", "/api/v1"), who("prefixed"), ""),
				in(urlRequest("get", "/api/v1"), who("", "prefixed"), ""),
			},
		},
		{
			name: "a resource rule leaves out its subresources",
			objs: []runtime.Object{
				clusterRole("admin", rule(s("*"), s("*"), s("pods"))),
				roleBinding("ns1", "b", "ClusterRole", "admin", "User:admin", "Group:admins"),
			},
			pass: []Attributes{in(resourceRequest("get", "", "pods", "", ""), who("admin"), "ns1")},
			fail: []Attributes{in(resourceRequest("get", "", "pods", "status", ""), who("admin"), "ns1")},
		},
		{
			name: "a subresource rule leaves out its resource",
			objs: []runtime.Object{
				clusterRole("admin", rule(s("*"), s("*"), s("pods/status"))),
				roleBinding("ns1", "b", "ClusterRole", "admin", "User:admin", "Group:admins"),
			},
			pass: []Attributes{in(resourceRequest("get", "", "pods", "status", ""), who("admin"), "ns1")},
			fail: []Attributes{in(resourceRequest("get", "", "pods", "", ""), who("admin"), "ns1")},
		},
		{
			name: "roles in their namespace only",
			objs: []runtime.Object{
				role("ns1", "reader", rule(s("get", "list"), s(""), s("configmaps"))),
				role("ns2", "reader", rule(s("*"), s("*"), s("*"))),
				roleBinding("ns1", "b", "Role", "reader", "User:alice"),
			},
			pass: []Attributes{
				in(resourceRequest("get", "", "configmaps", "", "x"), who("alice"), "ns1"),
				in(resourceRequest("list", "", "configmaps", "", ""), who("alice"), "ns1"),
			},
			fail: []Attributes{
				in(resourceRequest("create", "", "configmaps", "", ""), who("alice"), "ns1"),
				in(resourceRequest("get", "", "configmaps", "", "x"), who("alice"), "ns2"),
				in(resourceRequest("list", "", "configmaps", "", ""), who("alice"), ""),
				in(resourceRequest("get", "", "configmaps", "", "x"), who("bob"), "ns1"),
			},
		},
		{
			name: "service accounts",
			objs: []runtime.Object{
				clusterRole("view", rule(s("get"), s(""), s("configmaps"))),
				roleBinding("ns1", "local", "ClusterRole", "view", "ServiceAccount:builder"),
				roleBinding("ns1", "other", "ClusterRole", "view", "ServiceAccount:ns3/deployer"),
				clusterRoleBinding("no-namespace", "view", "ServiceAccount:nobody"),
				clusterRoleBinding("everywhere", "view", "ServiceAccount:ns4/robot"),
			},
			pass: []Attributes{
				in(resourceRequest("get", "", "configmaps", "", "x"), who("system:serviceaccount:ns1:builder"), "ns1"),
				in(resourceRequest("get", "", "configmaps", "", "x"), who("system:serviceaccount:ns3:deployer"), "ns1"),
				in(resourceRequest("get", "", "configmaps", "", "x"), who("system:serviceaccount:ns4:robot"), "ns9"),
			},
			fail: []Attributes{
				in(resourceRequest("get", "", "configmaps", "", "x"), who("system:serviceaccount:ns2:builder"), "ns1"),
				in(resourceRequest("get", "", "configmaps", "", "x"), who("system:serviceaccount:ns1:builder"), "ns2"),
				in(resourceRequest("get", "", "configmaps", "", "x"), who("builder"), "ns1"),
				in(resourceRequest("get", "", "configmaps", "", "x"), who("system:serviceaccount::nobody"), ""),
				in(resourceRequest("get", "", "configmaps", "", "x"), who("system:serviceaccount:ns1:nobody"), "ns1"),
			},
		},
		{
			name: "bindings of roles that do not exist grant nothing",
			objs: []runtime.Object{
				roleBinding("ns1", "b", "Role", "missing", "User:alice"),
				clusterRoleBinding("c", "missing", "User:alice"),
			},
			fail: []Attributes{in(resourceRequest("get", "", "configmaps", "", "x"), who("alice"), "ns1")},
		},
		{
			name: "system:masters without any binding",
			pass: []Attributes{
				in(resourceRequest("delete", "", "namespaces", "", "x"), who("root", "system:masters"), "x"),
				in(urlRequest("get", "/metrics"), who("root", "system:masters"), ""),
			},
			fail: []Attributes{in(urlRequest("get", "/metrics"), who("root", "system:authenticated"), "")},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewStatic(tc.objs...)
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
	r := NewStatic(
		clusterRole("view", rule(s("get"), s(""), s("configmaps"))),
		clusterRoleBinding("readers", "view", "User:bob", "Group:dev"),
		roleBinding("ns1", "sa", "ClusterRole", "view", "ServiceAccount:builder"),
		roleBinding("ns2", "broken", "Role", "gone", "User:carol"),
		clusterRoleBinding("broken", "absent", "User:carol"),
	)
	ctx := context.Background()
	for _, tc := range []struct {
		a        Attributes
		decision authorizer.Decision
		reason   string
	}{
		{in(resourceRequest("get", "", "configmaps", "", "x"), who("alice", "dev"), "ns1"), authorizer.DecisionAllow,
			`RBAC: allowed by ClusterRoleBinding "readers" of ClusterRole "view" to Group "dev"`},
		{in(resourceRequest("get", "", "configmaps", "", "x"), who("bob"), ""), authorizer.DecisionAllow,
			`RBAC: allowed by ClusterRoleBinding "readers" of ClusterRole "view" to User "bob"`},
		{in(resourceRequest("get", "", "configmaps", "", "x"), who("system:serviceaccount:ns1:builder"), "ns1"), authorizer.DecisionAllow,
			`RBAC: allowed by RoleBinding "sa/ns1" of ClusterRole "view" to ServiceAccount "builder/ns1"`},
		{in(resourceRequest("get", "", "configmaps", "", "x"), who("root", "system:masters"), "ns1"), authorizer.DecisionAllow, ""},
		{in(resourceRequest("get", "", "configmaps", "", "x"), who("dave"), "ns1"), authorizer.DecisionNoOpinion, ""},
		{in(resourceRequest("get", "", "configmaps", "", "x"), who("carol"), "ns2"), authorizer.DecisionNoOpinion,
			`RBAC: [clusterrole.rbac.authorization.k8s.io "absent" not found, role.rbac.authorization.k8s.io "gone" not found]`},
	} {
		d, reason, err := r.Authorize(ctx, tc.a.Record())
		if d != tc.decision || reason != tc.reason || err != nil {
			t.Errorf("%s in %q: %v %q %v, want %v %q", tc.a.User.Name, tc.a.Namespace, d, reason, err, tc.decision, tc.reason)
		}
	}
	if _, reason := r.Allowed(ctx, in(resourceRequest("get", "", "configmaps", "", "x"), who("carol"), "ns2")); !strings.Contains(reason, `"gone" not found`) {
		t.Errorf("Allowed's denial reason: %q", reason)
	}
}

// TestRulesFor: the rules of every binding naming the user, cluster-wide
// and in the namespace, each binding once, split into resource and
// non-resource rules as SelfSubjectRulesReview reports them.
func TestRulesFor(t *testing.T) {
	r := NewStatic(
		clusterRole("view", rule(s("get"), s(""), s("configmaps"))),
		clusterRole("discovery", urlRule(s("get"), s("/api", "/api/*"))),
		role("ns1", "edit", rule(s("create"), s(""), s("configmaps"))),
		clusterRoleBinding("readers", "view", "User:alice", "Group:dev"),
		clusterRoleBinding("disco", "discovery", "Group:system:authenticated"),
		roleBinding("ns1", "editors", "Role", "edit", "Group:dev"),
		roleBinding("ns2", "editors", "Role", "edit", "Group:dev"),
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

// TestForbiddenMessages: the 403 of a refused request is kube-apiserver's,
// word for word, for every scope.
func TestForbiddenMessages(t *testing.T) {
	u := who("alice", "system:authenticated")
	for _, tc := range []struct {
		a    Attributes
		want string
	}{
		{in(resourceRequest("list", "", "configmaps", "", ""), u, "y"),
			`configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" in the namespace "y"`},
		{in(resourceRequest("get", "", "configmaps", "", "app"), u, "y"),
			`configmaps "app" is forbidden: User "alice" cannot get resource "configmaps" in API group "" in the namespace "y"`},
		{in(resourceRequest("list", "rbac.authorization.k8s.io", "clusterroles", "", ""), u, ""),
			`clusterroles.rbac.authorization.k8s.io is forbidden: User "alice" cannot list resource "clusterroles" in API group "rbac.authorization.k8s.io" at the cluster scope`},
		{in(resourceRequest("update", "", "namespaces", "status", "y"), u, "y"),
			`namespaces "y" is forbidden: User "alice" cannot update resource "namespaces/status" in API group "" in the namespace "y"`},
		{in(urlRequest("get", "/metrics"), u, ""), `forbidden: User "alice" cannot get path "/metrics"`},
		{in(urlRequest("get", "/a<b>&c"), u, ""), `forbidden: User "alice" cannot get path "/a&lt;b&gt;&amp;c"`},
	} {
		st := Forbidden(tc.a, "").ErrStatus
		if st.Code != 403 || st.Reason != metav1.StatusReasonForbidden || st.Message != tc.want {
			t.Errorf("%d %s %q, want %q", st.Code, st.Reason, st.Message, tc.want)
		}
		if st.Details == nil || st.Details.Kind != tc.a.Resource || st.Details.Group != tc.a.APIGroup || st.Details.Name != tc.a.Name {
			t.Errorf("details %+v for %+v", st.Details, tc.a)
		}
	}
	if got := Forbidden(in(urlRequest("get", "/x"), u, ""), "RBAC: boom").ErrStatus.Message; got != `forbidden: User "alice" cannot get path "/x": RBAC: boom` {
		t.Errorf("with a reason: %q", got)
	}
}
