package rbac

import (
	"fmt"
	"maps"
	"strings"

	"github.com/meridian-cp/meridian/lib/kube/registry"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// KeyPrefix is the store key prefix of every RBAC object (registry's
// layout, <KeyRoot><group>/<resource>/[<namespace>/]<name>): one watch of
// it follows the four kinds.
const KeyPrefix = registry.KeyRoot + rbacv1.GroupName + "/"

// Put records a decoded RBAC object; other objects are ignored.
func (o *Objects) Put(obj runtime.Object) {
	switch v := obj.(type) {
	case *rbacv1.ClusterRole:
		o.putClusterRole(v.Name, v.Rules, true)
	case *rbacv1.Role:
		o.putRole(v.Namespace, v.Name, v.Rules, true)
	case *rbacv1.ClusterRoleBinding:
		o.putClusterRoleBinding(v.Name, &binding{name: v.Name, roleRef: v.RoleRef, subjects: v.Subjects})
	case *rbacv1.RoleBinding:
		o.putRoleBinding(v.Namespace, v.Name, &binding{namespace: v.Namespace, name: v.Name, roleRef: v.RoleRef, subjects: v.Subjects})
	}
}

// Remove records the deletion of the object of resource (clusterroles,
// roles, clusterrolebindings or rolebindings) namespace/name.
func (o *Objects) Remove(resource, namespace, name string) {
	switch resource {
	case "clusterroles":
		o.putClusterRole(name, nil, false)
	case "roles":
		o.putRole(namespace, name, nil, false)
	case "clusterrolebindings":
		o.putClusterRoleBinding(name, nil)
	case "rolebindings":
		o.putRoleBinding(namespace, name, nil)
	}
}

// Decoder decodes a stored value at revision rev into obj.
type Decoder func(value []byte, rev int64, obj runtime.Object) error

// Apply records the object stored under key (below KeyPrefix) at revision
// rev; a nil value is a deletion. Keys of other resources are ignored. A
// value that does not decode counts as deleted, so that it grants
// nothing, and its error is returned for the caller to log.
func (o *Objects) Apply(key string, value []byte, rev int64, decode Decoder) error {
	resource, rest, _ := strings.Cut(strings.TrimPrefix(key, KeyPrefix), "/")
	var obj runtime.Object
	switch resource {
	case "roles":
		obj = &rbacv1.Role{}
	case "clusterroles":
		obj = &rbacv1.ClusterRole{}
	case "rolebindings":
		obj = &rbacv1.RoleBinding{}
	case "clusterrolebindings":
		obj = &rbacv1.ClusterRoleBinding{}
	default:
		return nil
	}
	namespace, name := "", rest
	if resource == "roles" || resource == "rolebindings" {
		namespace, name, _ = strings.Cut(rest, "/")
	}
	if value == nil {
		o.Remove(resource, namespace, name)
		return nil
	}
	if err := decode(value, rev, obj); err != nil {
		o.Remove(resource, namespace, name)
		return fmt.Errorf("rbac: %s does not decode; it grants nothing: %w", key, err)
	}
	o.Put(obj)
	return nil
}

// Objects are the RBAC objects a policy is built from, owned by the one
// goroutine that follows the store (or by NewStatic): it is not safe for
// concurrent use. Each change marks what it touched, and RBAC.Publish
// builds the next policy from the last one, copying only that.
type Objects struct {
	clusterRoles        map[string][]rbacv1.PolicyRule
	roles               map[string]map[string][]rbacv1.PolicyRule
	clusterRoleBindings map[string]*binding
	roleBindings        map[string]map[string]*binding

	clusterRolesChanged, clusterBindingsChanged bool
	rolesChanged, bindingsChanged               map[string]bool // by namespace
}

// NewObjects returns an empty Objects.
func NewObjects() *Objects {
	o := &Objects{
		clusterRoles:        map[string][]rbacv1.PolicyRule{},
		roles:               map[string]map[string][]rbacv1.PolicyRule{},
		clusterRoleBindings: map[string]*binding{},
		roleBindings:        map[string]map[string]*binding{},
	}
	o.resetChanges()
	return o
}

func (o *Objects) resetChanges() {
	o.clusterRolesChanged, o.clusterBindingsChanged = false, false
	o.rolesChanged, o.bindingsChanged = map[string]bool{}, map[string]bool{}
}

// putClusterRole records the ClusterRole name with its rules, or its
// deletion when present is false; the put methods below do the same for
// the other kinds (a nil binding is a deletion).
func (o *Objects) putClusterRole(name string, rules []rbacv1.PolicyRule, present bool) {
	if present {
		o.clusterRoles[name] = rules
	} else {
		delete(o.clusterRoles, name)
	}
	o.clusterRolesChanged = true
}

func (o *Objects) putRole(namespace, name string, rules []rbacv1.PolicyRule, present bool) {
	putNested(o.roles, namespace, name, rules, present)
	o.rolesChanged[namespace] = true
}

func (o *Objects) putClusterRoleBinding(name string, b *binding) {
	if b != nil {
		o.clusterRoleBindings[name] = b
	} else {
		delete(o.clusterRoleBindings, name)
	}
	o.clusterBindingsChanged = true
}

func (o *Objects) putRoleBinding(namespace, name string, b *binding) {
	putNested(o.roleBindings, namespace, name, b, b != nil)
	o.bindingsChanged[namespace] = true
}

func putNested[V any](m map[string]map[string]V, namespace, name string, v V, present bool) {
	inner := m[namespace]
	if !present {
		delete(inner, name)
		if len(inner) == 0 {
			delete(m, namespace)
		}
		return
	}
	if inner == nil {
		inner = map[string]V{}
		m[namespace] = inner
	}
	inner[name] = v
}

// publish returns the policy of the objects at revision rev, built from
// prev by copying what changed since the last publish, and forgets the
// changes.
func (o *Objects) publish(prev *policy, rev int64) *policy {
	next := *prev
	next.rev = rev
	if o.clusterRolesChanged {
		next.clusterRoles = maps.Clone(o.clusterRoles)
	}
	if len(o.rolesChanged) > 0 {
		next.roles = maps.Clone(prev.roles)
		for ns := range o.rolesChanged {
			if inner, ok := o.roles[ns]; ok {
				next.roles[ns] = maps.Clone(inner)
			} else {
				delete(next.roles, ns)
			}
		}
	}
	if o.clusterBindingsChanged {
		next.cluster = newSubjectIndex(o.clusterRoleBindings)
	}
	if len(o.bindingsChanged) > 0 {
		next.namespaces = maps.Clone(prev.namespaces)
		for ns := range o.bindingsChanged {
			if inner, ok := o.roleBindings[ns]; ok {
				next.namespaces[ns] = newSubjectIndex(inner)
			} else {
				delete(next.namespaces, ns)
			}
		}
	}
	o.resetChanges()
	return &next
}
