package authz

import (
	"context"
	"testing"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestEscalation: a role may grant only what its author holds, unless the
// author may "escalate"; a binding may bind only a role whose rules its
// author holds, unless the author may "bind" it; system:masters may do
// both; an update that changes only owner references or finalizers is
// not checked. The messages are kube-apiserver's.
func TestEscalation(t *testing.T) {
	res := map[string]*registry.Resource{}
	for _, r := range registry.RBAC() {
		res[r.GVR.Resource] = r
	}
	r := NewStatic(
		clusterRole("cluster-admin", fullAuthority...),
		clusterRole("cm-reader", rule(s("get", "list"), s(""), s("configmaps"))),
		clusterRole("binder", rule(s("create", "update"), s("rbac.authorization.k8s.io"), s("rolebindings", "roles", "clusterroles", "clusterrolebindings"))),
		clusterRole("escalator", rule(s("escalate"), s("rbac.authorization.k8s.io"), s("roles"))),
		roleBinding("team", "binder-local", "ClusterRole", "binder", "User:bob"),
		roleBinding("team", "reads", "ClusterRole", "cm-reader", "User:bob"),
		clusterRoleBinding("bind-view", "binder", "User:carol"),
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "bind-readers"}, Rules: []rbacv1.PolicyRule{
			{Verbs: s("bind"), APIGroups: s("rbac.authorization.k8s.io"), Resources: s("clusterroles"), ResourceNames: s("cm-reader")}}},
		clusterRoleBinding("carol-binds", "bind-readers", "User:carol"),
		roleBinding("team", "esc", "ClusterRole", "escalator", "User:erin"),
		roleBinding("team", "erin-binder", "ClusterRole", "binder", "User:erin"),
	)
	as := func(name string, groups ...string) context.Context {
		return identity.WithUser(context.Background(), identity.User{Name: name, Groups: append(groups, "system:authenticated")})
	}
	bindAdmin := roleBinding("team", "x", "ClusterRole", "cluster-admin", "User:bob")
	bindReader := roleBinding("team", "x", "ClusterRole", "cm-reader", "User:dave")
	writeSecrets := role("team", "w", rule(s("create"), s(""), s("secrets")))
	readCM := role("team", "r", rule(s("get"), s(""), s("configmaps")))
	for _, tc := range []struct {
		name     string
		ctx      context.Context
		resource string
		ns, req  string // the request's namespace and name
		obj, old runtime.Object
		want     string // the error message; "" for none
		notFound bool
	}{
		{"bob binds cluster-admin", as("bob"), "rolebindings", "team", "", bindAdmin, nil,
			`rolebindings.rbac.authorization.k8s.io "x" is forbidden: user "bob" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:
{APIGroups:["*"], Resources:["*"], Verbs:["*"]}
{NonResourceURLs:["*"], Verbs:["*"]}`, false},
		{"bob binds what he holds", as("bob"), "rolebindings", "team", "", bindReader, nil, "", false},
		{"bob binds what he holds elsewhere only", as("bob"), "rolebindings", "other", "", roleBinding("other", "x", "ClusterRole", "cm-reader"), nil,
			`rolebindings.rbac.authorization.k8s.io "x" is forbidden: user "bob" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:
{APIGroups:[""], Resources:["configmaps"], Verbs:["get" "list"]}`, false},
		{"carol may bind cm-reader by name", as("carol"), "clusterrolebindings", "", "", clusterRoleBinding("x", "cm-reader", "User:dave"), nil, "", false},
		{"carol may not bind cluster-admin", as("carol"), "clusterrolebindings", "", "", clusterRoleBinding("x", "cluster-admin", "User:dave"), nil,
			`clusterrolebindings.rbac.authorization.k8s.io "x" is forbidden: user "carol" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:
{APIGroups:["*"], Resources:["*"], Verbs:["*"]}
{NonResourceURLs:["*"], Verbs:["*"]}`, false},
		{"a binding of a missing role", as("bob"), "rolebindings", "team", "", roleBinding("team", "x", "Role", "nope"), nil,
			`role.rbac.authorization.k8s.io "nope" not found`, true},
		{"masters bind anything", as("root", MastersGroup), "rolebindings", "team", "", bindAdmin, nil, "", false},
		{"bob writes a role he does not hold", as("bob"), "roles", "team", "", writeSecrets, nil,
			`roles.rbac.authorization.k8s.io "w" is forbidden: user "bob" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:
{APIGroups:[""], Resources:["secrets"], Verbs:["create"]}`, false},
		{"bob writes a role he holds", as("bob"), "roles", "team", "", readCM, nil, "", false},
		{"erin may escalate roles", as("erin"), "roles", "team", "", writeSecrets, nil, "", false},
		{"erin may escalate roles in team only", as("erin"), "clusterroles", "", "", clusterRole("w", rule(s("create"), s(""), s("secrets"))), nil,
			`clusterroles.rbac.authorization.k8s.io "w" is forbidden: user "erin" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:
{APIGroups:[""], Resources:["secrets"], Verbs:["create"]}`, false},
		{"an aggregation rule needs everything", as("carol"), "clusterroles", "", "",
			&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "agg"}, AggregationRule: &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{}}}}, nil,
			`clusterroles.rbac.authorization.k8s.io "agg" is forbidden: must have cluster-admin privileges to use the aggregationRule`, false},
		{"an owner reference added", as("gc"), "rolebindings", "team", "x", withOwner(bindAdmin), bindAdmin, "", false},
		{"an update that also escalates", as("gc"), "rolebindings", "team", "x", withOwner(roleBinding("team", "x", "ClusterRole", "cluster-admin", "User:eve")), bindAdmin,
			`rolebindings.rbac.authorization.k8s.io "x" is forbidden: user "gc" (groups=["system:authenticated"]) is attempting to grant RBAC permissions not currently held:
{APIGroups:["*"], Resources:["*"], Verbs:["*"]}
{NonResourceURLs:["*"], Verbs:["*"]}`, false},
		{"other kinds are not checked", as("bob"), "configmaps", "team", "", readCM, nil, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := res[tc.resource]
			if rs == nil {
				rs = &registry.Resource{}
			}
			err := r.GuardWrite(tc.ctx, rs, tc.ns, tc.req, tc.obj, tc.old)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == "":
			case err == nil:
				t.Fatalf("allowed, want %s", tc.want)
			case err.Error() != tc.want:
				t.Fatalf("error:\n%s\nwant:\n%s", err, tc.want)
			case tc.notFound && !apierrors.IsNotFound(err), !tc.notFound && !apierrors.IsForbidden(err):
				t.Fatalf("error of reason %v", apierrors.ReasonForError(err))
			}
		})
	}
}

func withOwner(b *rbacv1.RoleBinding) *rbacv1.RoleBinding {
	c := b.DeepCopy()
	c.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "u"}}
	return c
}
