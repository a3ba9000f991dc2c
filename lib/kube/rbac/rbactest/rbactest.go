// Package rbactest builds RBAC objects and authorization attributes
// tersely, for the tests of lib/kube/rbac and of its users.
package rbactest

import (
	"strings"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/rbac"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterRole is a ClusterRole named name with rules.
func ClusterRole(name string, rules ...rbacv1.PolicyRule) *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
}

// Role is a Role namespace/name with rules.
func Role(namespace, name string, rules ...rbacv1.PolicyRule) *rbacv1.Role {
	return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Rules: rules}
}

// Subjects reads "User:alice", "Group:dev", "ServiceAccount:ns/name" (or
// "ServiceAccount:name", namespace unset).
func Subjects(specs ...string) []rbacv1.Subject {
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

// ClusterRoleBinding binds the ClusterRole roleName to the Subjects subs.
func ClusterRoleBinding(name, roleName string, subs ...string) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roleName}, Subjects: Subjects(subs...)}
}

// RoleBinding binds, in namespace, the role of kind (Role or ClusterRole)
// roleName to the Subjects subs.
func RoleBinding(namespace, name, kind, roleName string, subs ...string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: roleName}, Subjects: Subjects(subs...)}
}

// Who is the user name in groups.
func Who(name string, groups ...string) identity.User {
	return identity.User{Name: name, Groups: groups}
}

// In is a asked by u in namespace.
func In(a rbac.Attributes, u identity.User, namespace string) rbac.Attributes {
	a.User, a.Namespace = u, namespace
	return a
}

// ResourceRequest is a request of verb on a resource (no user, no
// namespace).
func ResourceRequest(verb, group, resource, subresource, name string) rbac.Attributes {
	return rbac.Attributes{Verb: verb, ResourceRequest: true, APIGroup: group, Resource: resource, Subresource: subresource, Name: name}
}

// URLRequest is a request of verb on a non-resource path.
func URLRequest(verb, path string) rbac.Attributes {
	return rbac.Attributes{Verb: verb, Path: path}
}

// Rule allows verbs on resources of groups.
func Rule(verbs, groups, resources []string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, APIGroups: groups, Resources: resources}
}

// URLRule allows verbs on non-resource urls.
func URLRule(verbs, urls []string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{Verbs: verbs, NonResourceURLs: urls}
}

// S is its arguments.
func S(v ...string) []string { return v }
