package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-helpers/auth/rbac/validation"
)

// Objects writes the bootstrap objects through the API (validation,
// admission), as the user of the context: one in system:masters, as
// kube-apiserver's own loopback client. Its errors are Kubernetes errors.
// *resources.Server implements it.
type Objects interface {
	// CreateObject stores obj, a new object of res, as a create does; an
	// AlreadyExists error when one of its name exists.
	CreateObject(ctx context.Context, res *registry.Resource, obj runtime.Object) (runtime.Object, error)
	// UpdateObject replaces the object ref names with mutate's result
	// from the stored one, retried over concurrent writes; when mutate
	// returns the stored object unchanged, nothing is written. A NotFound
	// error when none exists; mutate's errors as they are.
	UpdateObject(ctx context.Context, res *registry.Resource, ref *apiv1.ResourceRef, mutate func(old runtime.Object) (runtime.Object, error)) (runtime.Object, error)
	// DeleteObject deletes the object ref names.
	DeleteObject(ctx context.Context, res *registry.Resource, ref *apiv1.ResourceRef, opts *metav1.DeleteOptions) (runtime.Object, error)
}

// attempts bounds the rounds of one object's reconciliation: an object
// created, deleted or recreated by another gateway meanwhile starts it over.
const attempts = 3

// errRecreate: a binding's role reference differs from the bootstrap one;
// the reference cannot change, so the binding is deleted and created again.
var errRecreate = errors.New("bootstrap: recreate")

// Reconcile makes the stored ClusterRoles and ClusterRoleBindings agree
// with the bootstrap policy, as kube-apiserver does at every start: a
// missing object is created; an existing one keeps what it has and gains
// what the policy adds (labels and annotations it lacks, rules its rules
// do not cover, aggregation selectors, subjects), unless it is annotated
// rbac.authorization.kubernetes.io/autoupdate=false, which leaves it as
// it is. A binding whose role reference differs is recreated. Gateways
// starting together reconcile safely: every write is guarded.
func Reconcile(ctx context.Context, reg *registry.Registry, objs Objects) error {
	roles, ok := reg.Lookup(rbacv1.SchemeGroupVersion.WithResource("clusterroles"))
	bindings, ok2 := reg.Lookup(rbacv1.SchemeGroupVersion.WithResource("clusterrolebindings"))
	if !ok || !ok2 {
		return errors.New("bootstrap: the registry serves no ClusterRoles or ClusterRoleBindings")
	}
	var errs []error
	for _, role := range ClusterRoles() {
		c := client{objs: objs, res: roles, name: role.Name}
		if err := c.reconcile(ctx, &role, func(stored runtime.Object) (runtime.Object, error) {
			return reconciledRole(stored.(*rbacv1.ClusterRole), &role), nil
		}); err != nil {
			errs = append(errs, fmt.Errorf("bootstrap: ClusterRole %s: %w", role.Name, err))
		}
	}
	for _, b := range ClusterRoleBindings() {
		c := client{objs: objs, res: bindings, name: b.Name}
		if err := c.reconcile(ctx, &b, func(stored runtime.Object) (runtime.Object, error) {
			return reconciledBinding(stored.(*rbacv1.ClusterRoleBinding), &b)
		}); err != nil {
			errs = append(errs, fmt.Errorf("bootstrap: ClusterRoleBinding %s: %w", b.Name, err))
		}
	}
	return errors.Join(errs...)
}

// client reconciles the object of res named name.
type client struct {
	objs Objects
	res  *registry.Resource
	name string
}

// reconcile brings the stored object in line with mutate, creating
// expected when none is stored.
func (c client) reconcile(ctx context.Context, expected runtime.Object, mutate func(runtime.Object) (runtime.Object, error)) error {
	ref := &apiv1.ResourceRef{Group: c.res.GVR.Group, Version: c.res.GVR.Version, Resource: c.res.GVR.Resource, Name: c.name}
	var err error
	for range attempts {
		_, err = c.objs.UpdateObject(ctx, c.res, ref, mutate)
		switch {
		case err == nil:
			return nil
		case apierrors.IsNotFound(err):
			if _, err = c.objs.CreateObject(ctx, c.res, expected.DeepCopyObject()); err == nil || !apierrors.IsAlreadyExists(err) {
				return err
			}
		case errors.Is(err, errRecreate):
			if _, err = c.objs.DeleteObject(ctx, c.res, ref, &metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		default:
			return err
		}
	}
	return err
}

func protected(annotations map[string]string) bool {
	return annotations[rbacv1.AutoUpdateAnnotationKey] == "false"
}

// merged is defaults overlaid with what m has: m's values win.
func merged(defaults, m map[string]string) map[string]string {
	if defaults == nil && m == nil {
		return nil
	}
	out := maps.Clone(defaults)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, m)
	return out
}

// reconciledRole is stored with what expected adds (the union, as
// kube-apiserver reconciles its bootstrap roles); stored itself when
// nothing is missing or it is protected.
func reconciledRole(stored, expected *rbacv1.ClusterRole) runtime.Object {
	if protected(stored.Annotations) {
		return stored
	}
	r := stored.DeepCopy()
	r.Annotations = merged(expected.Annotations, r.Annotations)
	r.Labels = merged(expected.Labels, r.Labels)
	if _, missing := validation.Covers(stored.Rules, expected.Rules); len(missing) > 0 {
		r.Rules = append(r.Rules, missing...)
	}
	switch {
	case expected.AggregationRule == nil:
		r.AggregationRule = nil
	case r.AggregationRule == nil:
		r.AggregationRule = expected.AggregationRule.DeepCopy()
	default:
		for _, want := range expected.AggregationRule.ClusterRoleSelectors {
			found := false
			for _, have := range r.AggregationRule.ClusterRoleSelectors {
				found = found || equality.Semantic.DeepEqual(have, want)
			}
			if !found {
				r.AggregationRule.ClusterRoleSelectors = append(r.AggregationRule.ClusterRoleSelectors, *want.DeepCopy())
			}
		}
	}
	return r
}

// reconciledBinding is stored with the subjects, labels and annotations
// expected adds; errRecreate when its role reference differs.
func reconciledBinding(stored, expected *rbacv1.ClusterRoleBinding) (runtime.Object, error) {
	if protected(stored.Annotations) {
		return stored, nil
	}
	if stored.RoleRef != expected.RoleRef {
		return nil, errRecreate
	}
	b := stored.DeepCopy()
	b.Annotations = merged(expected.Annotations, b.Annotations)
	b.Labels = merged(expected.Labels, b.Labels)
	for _, s := range expected.Subjects {
		found := false
		for _, have := range b.Subjects {
			found = found || have == s
		}
		if !found {
			b.Subjects = append(b.Subjects, s)
		}
	}
	return b, nil
}
