package rbac

import (
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// # The policy
//
// A policy is the RBAC objects of the cluster at one store revision,
// indexed for the request path. kube-apiserver's RBAC authorizer walks
// every ClusterRoleBinding, then every RoleBinding of the request's
// namespace, and asks of each whether it names the user; a policy instead
// files each binding under the subjects it names (users, groups, and
// service accounts under their user names, system:serviceaccount:ns:name),
// so that a decision reads only the bindings of the caller's user name
// and groups, whatever the number of bindings in the cluster. Roles are
// looked up by name when a binding is used, so a role's change needs no
// binding re-filed.
//
// A policy is immutable once published: readers load it from an atomic
// pointer and take no lock. Its maps are shared between successive
// policies; a change copies the maps it touches (the cluster-wide ones, or
// the outer map and the one namespace's inner map) and nothing else.

// policy is an immutable view of the RBAC objects at revision rev.
type policy struct {
	rev int64
	// clusterRoles are the ClusterRoles' rules by name.
	clusterRoles map[string][]rbacv1.PolicyRule
	// roles are the Roles' rules by namespace, then name.
	roles map[string]map[string][]rbacv1.PolicyRule
	// cluster files the ClusterRoleBindings by subject.
	cluster *subjectIndex
	// namespaces file each namespace's RoleBindings by subject.
	namespaces map[string]*subjectIndex
}

// subjectIndex files bindings under the subjects they name.
type subjectIndex struct {
	// users holds User subjects by name and ServiceAccount subjects by
	// their user name.
	users map[string][]*binding
	// groups holds Group subjects by name.
	groups map[string][]*binding
}

// binding is a RoleBinding or ClusterRoleBinding, as the policy uses it.
type binding struct {
	// namespace is "" for a ClusterRoleBinding.
	namespace, name string
	roleRef         rbacv1.RoleRef
	subjects        []rbacv1.Subject
}

func emptyPolicy() *policy {
	return &policy{
		clusterRoles: map[string][]rbacv1.PolicyRule{},
		roles:        map[string]map[string][]rbacv1.PolicyRule{},
		cluster:      &subjectIndex{users: map[string][]*binding{}, groups: map[string][]*binding{}},
		namespaces:   map[string]*subjectIndex{},
	}
}

// serviceAccountUser is the user name of a service account.
func serviceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// newSubjectIndex files bindings by the subjects that can apply to a user:
// a service account subject without a namespace is in the binding's
// namespace, or names nobody in a ClusterRoleBinding; subjects of other
// kinds name nobody.
func newSubjectIndex(bindings map[string]*binding) *subjectIndex {
	idx := &subjectIndex{users: map[string][]*binding{}, groups: map[string][]*binding{}}
	for _, b := range bindings {
		seenUsers, seenGroups := map[string]bool{}, map[string]bool{}
		for _, s := range b.subjects {
			switch s.Kind {
			case rbacv1.UserKind:
				if !seenUsers[s.Name] {
					seenUsers[s.Name] = true
					idx.users[s.Name] = append(idx.users[s.Name], b)
				}
			case rbacv1.GroupKind:
				if !seenGroups[s.Name] {
					seenGroups[s.Name] = true
					idx.groups[s.Name] = append(idx.groups[s.Name], b)
				}
			case rbacv1.ServiceAccountKind:
				ns := s.Namespace
				if ns == "" {
					ns = b.namespace
				}
				if ns == "" {
					continue
				}
				u := serviceAccountUser(ns, s.Name)
				if !seenUsers[u] {
					seenUsers[u] = true
					idx.users[u] = append(idx.users[u], b)
				}
			}
		}
	}
	return idx
}

// roleRules returns the rules of the role a binding in namespace refers
// to, or kube-apiserver's error for a role that does not exist.
func (p *policy) roleRules(ref rbacv1.RoleRef, namespace string) ([]rbacv1.PolicyRule, error) {
	switch ref.Kind {
	case "ClusterRole":
		if rules, ok := p.clusterRoles[ref.Name]; ok {
			return rules, nil
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: rbacv1.GroupName, Resource: "clusterrole"}, ref.Name)
	case "Role":
		if rules, ok := p.roles[namespace][ref.Name]; ok {
			return rules, nil
		}
		return nil, apierrors.NewNotFound(schema.GroupResource{Group: rbacv1.GroupName, Resource: "role"}, ref.Name)
	}
	return nil, fmt.Errorf("unsupported role reference kind: %q", ref.Kind)
}

// visit calls f with every binding that names a user of name and groups,
// ClusterRoleBindings first, then the RoleBindings of namespace (none when
// namespace is ""), until f returns false. A binding that names the user
// under several subjects may be visited more than once.
func (p *policy) visit(name string, groups []string, namespace string, f func(*binding) bool) {
	for _, idx := range [2]*subjectIndex{p.cluster, p.namespaces[namespace]} {
		if idx == nil || (idx != p.cluster && namespace == "") {
			continue
		}
		for _, b := range idx.users[name] {
			if !f(b) {
				return
			}
		}
		for _, g := range groups {
			for _, b := range idx.groups[g] {
				if !f(b) {
					return
				}
			}
		}
	}
}

// appliedSubject returns the first subject of b that names the user, as
// kube-apiserver reports it in a decision's reason.
func (b *binding) appliedSubject(name string, groups []string) rbacv1.Subject {
	for _, s := range b.subjects {
		switch s.Kind {
		case rbacv1.UserKind:
			if s.Name == name {
				return s
			}
		case rbacv1.GroupKind:
			for _, g := range groups {
				if g == s.Name {
					return s
				}
			}
		case rbacv1.ServiceAccountKind:
			ns := s.Namespace
			if ns == "" {
				ns = b.namespace
			}
			if ns != "" && serviceAccountUser(ns, s.Name) == name {
				return s
			}
		}
	}
	return rbacv1.Subject{}
}

// describe names the binding and the subject that applied, as
// kube-apiserver's "RBAC: allowed by ..." reasons do.
func (b *binding) describe(s rbacv1.Subject) string {
	subject := fmt.Sprintf("%s %q", s.Kind, s.Name)
	if s.Kind == rbacv1.ServiceAccountKind {
		ns := s.Namespace
		if ns == "" {
			ns = b.namespace
		}
		subject = fmt.Sprintf("%s %q", s.Kind, s.Name+"/"+ns)
	}
	if b.namespace == "" {
		return fmt.Sprintf("ClusterRoleBinding %q of %s %q to %s", b.name, b.roleRef.Kind, b.roleRef.Name, subject)
	}
	return fmt.Sprintf("RoleBinding %q of %s %q to %s", b.name+"/"+b.namespace, b.roleRef.Kind, b.roleRef.Name, subject)
}
