package registry

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TestRBACValidation: roles, cluster roles and bindings are validated as
// kube-apiserver's rbac validation does: rules need verbs and either
// groups and resources or (cluster roles only) non-resource URLs, never
// both; aggregation rules need valid selectors; bindings need a role
// reference of a kind their scope allows and subjects of a known kind;
// the role reference never changes.
func TestRBACValidation(t *testing.T) {
	ns := metav1.ObjectMeta{Name: "r", Namespace: "ns", ResourceVersion: "1"}
	cluster := metav1.ObjectMeta{Name: "system:r", ResourceVersion: "1"}
	get := rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}
	url := rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz"}}
	role := func(rules ...rbacv1.PolicyRule) *rbacv1.Role { return &rbacv1.Role{ObjectMeta: ns, Rules: rules} }
	clusterRole := func(agg *rbacv1.AggregationRule, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
		return &rbacv1.ClusterRole{ObjectMeta: cluster, AggregationRule: agg, Rules: rules}
	}
	ref := func(kind, name string) rbacv1.RoleRef {
		return rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: name}
	}
	user := rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}
	sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "builder"}
	binding := func(r rbacv1.RoleRef, subjects ...rbacv1.Subject) *rbacv1.RoleBinding {
		return &rbacv1.RoleBinding{ObjectMeta: ns, RoleRef: r, Subjects: subjects}
	}
	clusterBinding := func(r rbacv1.RoleRef, subjects ...rbacv1.Subject) *rbacv1.ClusterRoleBinding {
		return &rbacv1.ClusterRoleBinding{ObjectMeta: cluster, RoleRef: r, Subjects: subjects}
	}
	for _, tc := range []struct {
		name     string
		strategy Strategy
		obj, old runtime.Object
		want     []string
	}{
		{"role", roleStrategy{}, role(get), nil, []string{}},
		{"role without verbs", roleStrategy{}, role(rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}}), nil, []string{"FieldValueRequired rules[0].verbs"}},
		{"role without groups and resources", roleStrategy{}, role(rbacv1.PolicyRule{Verbs: []string{"get"}}), nil,
			[]string{"FieldValueRequired rules[0].apiGroups", "FieldValueRequired rules[0].resources"}},
		{"role with a URL", roleStrategy{}, role(url), nil, []string{"FieldValueInvalid rules[0].nonResourceURLs"}},
		{"role with a bad name", roleStrategy{}, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "a/b", Namespace: "ns"}}, nil, []string{"FieldValueInvalid metadata.name"}},
		{"cluster role with a URL", clusterRoleStrategy{}, clusterRole(nil, url), nil, []string{}},
		{"cluster role mixing URLs and resources", clusterRoleStrategy{}, clusterRole(nil, rbacv1.PolicyRule{Verbs: []string{"get"}, NonResourceURLs: []string{"/x"}, Resources: []string{"pods"}}), nil,
			[]string{"FieldValueInvalid rules[0].nonResourceURLs"}},
		{"aggregation rule", clusterRoleStrategy{}, clusterRole(&rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"a": "b"}}}}), nil, []string{}},
		{"empty aggregation rule", clusterRoleStrategy{}, clusterRole(&rbacv1.AggregationRule{}), nil, []string{"FieldValueRequired aggregationRule.clusterRoleSelectors"}},
		{"bad aggregation selector", clusterRoleStrategy{}, clusterRole(&rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"a": "b c"}}}}), nil,
			[]string{"FieldValueInvalid aggregationRule.clusterRoleSelectors[0]", "FieldValueInvalid aggregationRule.clusterRoleSelectors[0].matchLabels"}},

		{"binding", roleBindingStrategy{}, binding(ref("Role", "r"), user, sa), nil, []string{}},
		{"binding to a cluster role", roleBindingStrategy{}, binding(ref("ClusterRole", "view")), nil, []string{}},
		{"binding to a bad kind", roleBindingStrategy{}, binding(ref("Thing", "r")), nil, []string{"FieldValueNotSupported roleRef.kind"}},
		{"binding to another group", roleBindingStrategy{}, binding(rbacv1.RoleRef{APIGroup: "x", Kind: "Role", Name: "r"}), nil, []string{"FieldValueNotSupported roleRef.apiGroup"}},
		{"binding without a role name", roleBindingStrategy{}, binding(ref("Role", "")), nil, []string{"FieldValueRequired roleRef.name"}},
		{"subject of an unknown kind", roleBindingStrategy{}, binding(ref("Role", "r"), rbacv1.Subject{Kind: "Robot", Name: "x"}), nil, []string{"FieldValueNotSupported subjects[0].kind"}},
		{"user subject of another group", roleBindingStrategy{}, binding(ref("Role", "r"), rbacv1.Subject{Kind: "User", APIGroup: "x", Name: "a"}), nil, []string{"FieldValueNotSupported subjects[0].apiGroup"}},
		{"service account with a bad name", roleBindingStrategy{}, binding(ref("Role", "r"), rbacv1.Subject{Kind: "ServiceAccount", Name: "A_B"}), nil, []string{"FieldValueInvalid subjects[0].name"}},
		{"cluster binding to a role", clusterRoleBindingStrategy{}, clusterBinding(ref("Role", "r")), nil, []string{"FieldValueNotSupported roleRef.kind"}},
		{"cluster binding of a service account without namespace", clusterRoleBindingStrategy{}, clusterBinding(ref("ClusterRole", "r"), sa), nil, []string{"FieldValueRequired subjects[0].namespace"}},
		{"binding update", roleBindingStrategy{}, binding(ref("Role", "r"), user), binding(ref("Role", "r")), []string{}},
		{"binding's role changed", roleBindingStrategy{}, binding(ref("Role", "other")), binding(ref("Role", "r")), []string{"FieldValueInvalid roleRef"}},
		{"cluster binding's role changed", clusterRoleBindingStrategy{}, clusterBinding(ref("ClusterRole", "other")), clusterBinding(ref("ClusterRole", "r")), []string{"FieldValueInvalid roleRef"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var errs field.ErrorList
			if tc.old == nil {
				errs = tc.strategy.Validate(tc.obj)
			} else {
				errs = tc.strategy.ValidateUpdate(tc.obj, tc.old)
			}
			if got := fieldErrors(errs); !slices.Equal(got, tc.want) {
				t.Fatalf("errors %q, want %q (%v)", got, tc.want, errs)
			}
		})
	}
}

// TestRBACDefaults: a binding's role reference and its User and Group
// subjects default to the rbac.authorization.k8s.io group; service
// accounts stay in the core group.
func TestRBACDefaults(t *testing.T) {
	b := &rbacv1.RoleBinding{
		RoleRef:  rbacv1.RoleRef{Kind: "Role", Name: "r"},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: "a"}, {Kind: "Group", Name: "g"}, {Kind: "ServiceAccount", Name: "s"}},
	}
	roleBindingStrategy{}.PrepareForCreate(b)
	if b.RoleRef.APIGroup != rbacv1.GroupName || b.Subjects[0].APIGroup != rbacv1.GroupName || b.Subjects[1].APIGroup != rbacv1.GroupName || b.Subjects[2].APIGroup != "" {
		t.Fatalf("defaults: %+v", b)
	}
	if errs := (roleBindingStrategy{}).Validate(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns"}, RoleRef: b.RoleRef, Subjects: b.Subjects}); len(errs) > 0 {
		t.Fatalf("a defaulted binding is invalid: %v", errs)
	}
}
