package authz

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/rbac"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/component-helpers/auth/rbac/validation"
)

// # Escalation prevention
//
// Whoever may write Roles or bindings could otherwise grant themselves
// anything. As kube-apiserver's RBAC storage does, a write of a Role or
// ClusterRole must grant nothing its author does not hold (in the role's
// namespace; cluster-wide for a ClusterRole) unless the author may
// "escalate" roles, and a write of a binding must bind a role whose rules
// its author holds (in the binding's namespace) unless the author may
// "bind" that role. Members of system:masters may do either. An update
// that changes only what the garbage collector changes (owner references,
// finalizers) is not checked, so that the collector needs neither power.

// fullAuthority is what an aggregation rule may gather, so what setting
// one requires: everything, as cluster-admin.
var fullAuthority = []rbacv1.PolicyRule{
	{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}},
	{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}},
}

// GuardWrite checks a create (old nil) or an update of obj, an object of
// res written through a request on namespace/name (name empty for a
// create), for escalation. It returns nil for objects other than roles and
// bindings; a Forbidden error naming what the author lacks; or, for a
// binding whose role does not exist and that its author may not bind by
// name, the role's NotFound.
func (r *RBAC) GuardWrite(ctx context.Context, res *registry.Resource, namespace, name string, obj, old runtime.Object) error {
	if res.GVR.Group != rbacv1.GroupName {
		return nil
	}
	u, _ := identity.UserFrom(ctx)
	if rbac.Masters(u.Groups) {
		return nil
	}
	if old != nil && onlyGCFieldsChange(obj, old) {
		return nil
	}
	gr := res.GVR.GroupResource()
	switch o := obj.(type) {
	case *rbacv1.Role:
		if r.escalateAllowed(ctx, u, res, namespace, name) {
			return nil
		}
		if err := r.confirmNoEscalation(ctx, u, namespace, o.Rules); err != nil {
			return apierrors.NewForbidden(gr, o.Name, err)
		}
	case *rbacv1.ClusterRole:
		if r.escalateAllowed(ctx, u, res, "", name) {
			return nil
		}
		if err := r.confirmNoEscalation(ctx, u, "", o.Rules); err != nil {
			return apierrors.NewForbidden(gr, o.Name, err)
		}
		oldRole, _ := old.(*rbacv1.ClusterRole)
		if o.AggregationRule != nil || (oldRole != nil && oldRole.AggregationRule != nil) {
			if r.confirmNoEscalation(ctx, u, "", fullAuthority) != nil {
				return apierrors.NewForbidden(gr, o.Name, errors.New("must have cluster-admin privileges to use the aggregationRule"))
			}
		}
	case *rbacv1.RoleBinding:
		return r.guardBinding(ctx, u, gr, o.Name, o.RoleRef, namespace)
	case *rbacv1.ClusterRoleBinding:
		return r.guardBinding(ctx, u, gr, o.Name, o.RoleRef, "")
	}
	return nil
}

// escalateAllowed: u may "escalate" the role the request names.
func (r *RBAC) escalateAllowed(ctx context.Context, u identity.User, res *registry.Resource, namespace, name string) bool {
	ok, _ := r.Allowed(ctx, Attributes{User: u, Verb: "escalate", ResourceRequest: true, APIGroup: res.GVR.Group, APIVersion: "*",
		Resource: res.GVR.Resource, Namespace: namespace, Name: name})
	return ok
}

// guardBinding checks a binding named name in namespace ("" for a
// ClusterRoleBinding) of the role ref.
func (r *RBAC) guardBinding(ctx context.Context, u identity.User, gr schema.GroupResource, name string, ref rbacv1.RoleRef, namespace string) error {
	resource := ""
	switch ref.Kind {
	case "ClusterRole":
		resource = "clusterroles"
	case "Role":
		resource = "roles"
	}
	if resource != "" {
		if ok, _ := r.Allowed(ctx, Attributes{User: u, Verb: "bind", ResourceRequest: true, APIGroup: ref.APIGroup,
			Resource: resource, Namespace: namespace, Name: ref.Name}); ok {
			return nil
		}
	}
	rules, err := r.RoleRefRules(ctx, ref, namespace)
	if err != nil {
		return err
	}
	if err := r.confirmNoEscalation(ctx, u, namespace, rules); err != nil {
		return apierrors.NewForbidden(gr, name, err)
	}
	return nil
}

// confirmNoEscalation returns nil when u's rules in namespace cover rules,
// and otherwise kube-apiserver's description of what is missing.
func (r *RBAC) confirmNoEscalation(ctx context.Context, u identity.User, namespace string, rules []rbacv1.PolicyRule) error {
	owner, resolveErr := r.Rules(ctx, u, namespace)
	covered, missing := validation.Covers(owner, rules)
	if covered {
		return nil
	}
	var descriptions []string
	for _, m := range compactRules(missing) {
		if d := compactString(m); !slices.Contains(descriptions, d) {
			descriptions = append(descriptions, d)
		}
	}
	slices.Sort(descriptions)
	msg := fmt.Sprintf("user %q (groups=%q) is attempting to grant RBAC permissions not currently held:\n%s", u.Name, u.Groups, strings.Join(descriptions, "\n"))
	if resolveErr != nil {
		msg += fmt.Sprintf("; resolution errors: %v", []error{resolveErr})
	}
	return forbiddenReason(msg)
}

// onlyGCFieldsChange reports whether obj differs from old only in what
// the garbage collector changes: owner references and finalizers (and the
// managed fields that record them).
func onlyGCFieldsChange(obj, old runtime.Object) bool {
	c := obj.DeepCopyObject()
	cm, err := meta.Accessor(c)
	if err != nil {
		return false
	}
	om, err := meta.Accessor(old)
	if err != nil {
		return false
	}
	cm.SetOwnerReferences(om.GetOwnerReferences())
	cm.SetFinalizers(om.GetFinalizers())
	cm.SetSelfLink(om.GetSelfLink())
	cm.SetManagedFields(om.GetManagedFields())
	return equality.Semantic.DeepEqual(c, old)
}
