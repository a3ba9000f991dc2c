package registry

import (
	"slices"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// RBAC returns the rbac.authorization.k8s.io/v1 resources: Roles,
// ClusterRoles, RoleBindings and ClusterRoleBindings, defaulted and
// validated as kube-apiserver does.
func RBAC() []*Resource {
	gv := rbacv1.SchemeGroupVersion
	return []*Resource{
		{
			GVR: gv.WithResource("roles"), Kind: "Role", ListKind: "RoleList",
			SingularName: "role", Namespaced: true, Verbs: CRUDVerbs,
			New: func() runtime.Object { return &rbacv1.Role{} }, NewList: func() runtime.Object { return &rbacv1.RoleList{} },
			Strategy: roleStrategy{},
		},
		{
			GVR: gv.WithResource("clusterroles"), Kind: "ClusterRole", ListKind: "ClusterRoleList",
			SingularName: "clusterrole", Verbs: CRUDVerbs,
			New: func() runtime.Object { return &rbacv1.ClusterRole{} }, NewList: func() runtime.Object { return &rbacv1.ClusterRoleList{} },
			Strategy: clusterRoleStrategy{},
		},
		{
			GVR: gv.WithResource("rolebindings"), Kind: "RoleBinding", ListKind: "RoleBindingList",
			SingularName: "rolebinding", Namespaced: true, Verbs: CRUDVerbs,
			New: func() runtime.Object { return &rbacv1.RoleBinding{} }, NewList: func() runtime.Object { return &rbacv1.RoleBindingList{} },
			Strategy: roleBindingStrategy{},
			Columns: bindingColumns(func(obj runtime.Object) (rbacv1.RoleRef, []rbacv1.Subject) {
				b := obj.(*rbacv1.RoleBinding)
				return b.RoleRef, b.Subjects
			}),
		},
		{
			GVR: gv.WithResource("clusterrolebindings"), Kind: "ClusterRoleBinding", ListKind: "ClusterRoleBindingList",
			SingularName: "clusterrolebinding", Verbs: CRUDVerbs,
			New: func() runtime.Object { return &rbacv1.ClusterRoleBinding{} }, NewList: func() runtime.Object { return &rbacv1.ClusterRoleBindingList{} },
			Strategy: clusterRoleBindingStrategy{},
			Columns: bindingColumns(func(obj runtime.Object) (rbacv1.RoleRef, []rbacv1.Subject) {
				b := obj.(*rbacv1.ClusterRoleBinding)
				return b.RoleRef, b.Subjects
			}),
		},
	}
}

// bindingColumns are the Table columns kubectl prints for bindings, as
// kube-apiserver's printers make them: the role, the age and, with -o
// wide, the subjects by kind.
func bindingColumns(parts func(runtime.Object) (rbacv1.RoleRef, []rbacv1.Subject)) []Column {
	subjects := func(kind string) func(runtime.Object, time.Time) any {
		return func(obj runtime.Object, _ time.Time) any {
			_, subs := parts(obj)
			var names []string
			for _, s := range subs {
				switch {
				case s.Kind != kind:
				case kind == rbacv1.ServiceAccountKind:
					names = append(names, s.Namespace+"/"+s.Name)
				default:
					names = append(names, s.Name)
				}
			}
			return strings.Join(names, ", ")
		}
	}
	return []Column{{
		Definition: metav1.TableColumnDefinition{Name: "Role", Type: "string", Description: "RoleRef is the reference to the role the binding grants."},
		Cell: func(obj runtime.Object, _ time.Time) any {
			ref, _ := parts(obj)
			return ref.Kind + "/" + ref.Name
		},
	}, AgeColumn, {
		Definition: metav1.TableColumnDefinition{Name: "Users", Type: "string", Priority: 1, Description: "Users in the binding"},
		Cell:       subjects(rbacv1.UserKind),
	}, {
		Definition: metav1.TableColumnDefinition{Name: "Groups", Type: "string", Priority: 1, Description: "Groups in the binding"},
		Cell:       subjects(rbacv1.GroupKind),
	}, {
		Definition: metav1.TableColumnDefinition{Name: "ServiceAccounts", Type: "string", Priority: 1, Description: "ServiceAccounts in the binding"},
		Cell:       subjects(rbacv1.ServiceAccountKind),
	}}
}

// rbacName validates the names of roles and bindings, and the role names
// bindings refer to: any path segment, as kube-apiserver's
// ValidateRBACName allows ("system:basic-user" included).
func rbacName(name string, _ bool) []string { return path.IsValidPathSegmentName(name) }

type roleStrategy struct{}

func (roleStrategy) PrepareForCreate(runtime.Object)          {}
func (roleStrategy) PrepareForUpdate(obj, old runtime.Object) {}

func (roleStrategy) Validate(obj runtime.Object) field.ErrorList {
	r := obj.(*rbacv1.Role)
	errs := apivalidation.ValidateObjectMeta(&r.ObjectMeta, true, rbacName, field.NewPath("metadata"))
	return append(errs, validateRules(r.Rules, true)...)
}

func (s roleStrategy) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	errs := s.Validate(obj)
	return append(errs, apivalidation.ValidateObjectMetaUpdate(&obj.(*rbacv1.Role).ObjectMeta, &old.(*rbacv1.Role).ObjectMeta, field.NewPath("metadata"))...)
}

type clusterRoleStrategy struct{}

func (clusterRoleStrategy) PrepareForCreate(runtime.Object)          {}
func (clusterRoleStrategy) PrepareForUpdate(obj, old runtime.Object) {}

func (clusterRoleStrategy) Validate(obj runtime.Object) field.ErrorList {
	return validateClusterRole(obj.(*rbacv1.ClusterRole), false)
}

// ValidateUpdate keeps accepting label values a selector of the stored
// aggregation rule already had, as kube-apiserver does, so that a role
// stored before validation tightened can still be updated.
func (clusterRoleStrategy) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	r, oldR := obj.(*rbacv1.ClusterRole), old.(*rbacv1.ClusterRole)
	errs := validateClusterRole(r, len(validateAggregationRule(oldR.AggregationRule, false)) > 0)
	return append(errs, apivalidation.ValidateObjectMetaUpdate(&r.ObjectMeta, &oldR.ObjectMeta, field.NewPath("metadata"))...)
}

func validateClusterRole(r *rbacv1.ClusterRole, allowInvalidLabelValues bool) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&r.ObjectMeta, false, rbacName, field.NewPath("metadata"))
	errs = append(errs, validateRules(r.Rules, false)...)
	return append(errs, validateAggregationRule(r.AggregationRule, allowInvalidLabelValues)...)
}

// validateAggregationRule: a rule, when given, has at least one selector,
// and every selector is a valid label selector.
func validateAggregationRule(rule *rbacv1.AggregationRule, allowInvalidLabelValues bool) field.ErrorList {
	if rule == nil {
		return nil
	}
	p := field.NewPath("aggregationRule", "clusterRoleSelectors")
	var errs field.ErrorList
	if len(rule.ClusterRoleSelectors) == 0 {
		errs = append(errs, field.Required(p, "at least one clusterRoleSelector required if aggregationRule is non-nil"))
	}
	opts := metav1validation.LabelSelectorValidationOptions{AllowInvalidLabelValueInSelector: allowInvalidLabelValues}
	for i := range rule.ClusterRoleSelectors {
		sel := &rule.ClusterRoleSelectors[i]
		errs = append(errs, metav1validation.ValidateLabelSelector(sel, opts, p.Index(i))...)
		if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
			errs = append(errs, field.Invalid(p.Index(i), sel, "invalid label selector."))
		}
	}
	return errs
}

// validateRules checks policy rules as kube-apiserver's ValidatePolicyRule:
// every rule names verbs; a rule is about non-resource URLs (cluster roles
// only) or about resources (with groups and resources), never both.
func validateRules(rules []rbacv1.PolicyRule, namespaced bool) field.ErrorList {
	var errs field.ErrorList
	for i, rule := range rules {
		p := field.NewPath("rules").Index(i)
		if len(rule.Verbs) == 0 {
			errs = append(errs, field.Required(p.Child("verbs"), "verbs must contain at least one value"))
		}
		if len(rule.NonResourceURLs) > 0 {
			if namespaced {
				errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), rule.NonResourceURLs, "namespaced rules cannot apply to non-resource URLs"))
			}
			if len(rule.APIGroups) > 0 || len(rule.Resources) > 0 || len(rule.ResourceNames) > 0 {
				errs = append(errs, field.Invalid(p.Child("nonResourceURLs"), rule.NonResourceURLs, "rules cannot apply to both regular resources and non-resource URLs"))
			}
			continue
		}
		if len(rule.APIGroups) == 0 {
			errs = append(errs, field.Required(p.Child("apiGroups"), "resource rules must supply at least one api group"))
		}
		if len(rule.Resources) == 0 {
			errs = append(errs, field.Required(p.Child("resources"), "resource rules must supply at least one resource"))
		}
	}
	return errs
}

type roleBindingStrategy struct{}

func (roleBindingStrategy) PrepareForCreate(obj runtime.Object) {
	b := obj.(*rbacv1.RoleBinding)
	defaultBinding(&b.RoleRef, b.Subjects)
}

func (roleBindingStrategy) PrepareForUpdate(obj, old runtime.Object) {
	b := obj.(*rbacv1.RoleBinding)
	defaultBinding(&b.RoleRef, b.Subjects)
}

func (roleBindingStrategy) Validate(obj runtime.Object) field.ErrorList {
	b := obj.(*rbacv1.RoleBinding)
	errs := apivalidation.ValidateObjectMeta(&b.ObjectMeta, true, rbacName, field.NewPath("metadata"))
	return append(errs, validateBinding(b.RoleRef, b.Subjects, true)...)
}

func (s roleBindingStrategy) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	b, oldB := obj.(*rbacv1.RoleBinding), old.(*rbacv1.RoleBinding)
	errs := s.Validate(obj)
	errs = append(errs, apivalidation.ValidateObjectMetaUpdate(&b.ObjectMeta, &oldB.ObjectMeta, field.NewPath("metadata"))...)
	return append(errs, validateRoleRefUpdate(b.RoleRef, oldB.RoleRef)...)
}

type clusterRoleBindingStrategy struct{}

func (clusterRoleBindingStrategy) PrepareForCreate(obj runtime.Object) {
	b := obj.(*rbacv1.ClusterRoleBinding)
	defaultBinding(&b.RoleRef, b.Subjects)
}

func (clusterRoleBindingStrategy) PrepareForUpdate(obj, old runtime.Object) {
	b := obj.(*rbacv1.ClusterRoleBinding)
	defaultBinding(&b.RoleRef, b.Subjects)
}

func (clusterRoleBindingStrategy) Validate(obj runtime.Object) field.ErrorList {
	b := obj.(*rbacv1.ClusterRoleBinding)
	errs := apivalidation.ValidateObjectMeta(&b.ObjectMeta, false, rbacName, field.NewPath("metadata"))
	return append(errs, validateBinding(b.RoleRef, b.Subjects, false)...)
}

func (s clusterRoleBindingStrategy) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	b, oldB := obj.(*rbacv1.ClusterRoleBinding), old.(*rbacv1.ClusterRoleBinding)
	errs := s.Validate(obj)
	errs = append(errs, apivalidation.ValidateObjectMetaUpdate(&b.ObjectMeta, &oldB.ObjectMeta, field.NewPath("metadata"))...)
	return append(errs, validateRoleRefUpdate(b.RoleRef, oldB.RoleRef)...)
}

// defaultBinding applies the defaults of rbac.authorization.k8s.io/v1: the
// role reference's group, and the group of User and Group subjects.
func defaultBinding(ref *rbacv1.RoleRef, subjects []rbacv1.Subject) {
	if ref.APIGroup == "" {
		ref.APIGroup = rbacv1.GroupName
	}
	for i := range subjects {
		s := &subjects[i]
		if s.APIGroup == "" && (s.Kind == rbacv1.UserKind || s.Kind == rbacv1.GroupKind) {
			s.APIGroup = rbacv1.GroupName
		}
	}
}

// validateBinding checks a binding's role reference and subjects, as
// kube-apiserver's ValidateRoleBinding and ValidateClusterRoleBinding do:
// a ClusterRoleBinding refers to a ClusterRole, and its service account
// subjects name their namespace.
func validateBinding(ref rbacv1.RoleRef, subjects []rbacv1.Subject, namespaced bool) field.ErrorList {
	var errs field.ErrorList
	refPath := field.NewPath("roleRef")
	if ref.APIGroup != rbacv1.GroupName {
		errs = append(errs, field.NotSupported(refPath.Child("apiGroup"), ref.APIGroup, []string{rbacv1.GroupName}))
	}
	kinds := []string{"ClusterRole"}
	if namespaced {
		kinds = []string{"Role", "ClusterRole"}
	}
	if !slices.Contains(kinds, ref.Kind) {
		errs = append(errs, field.NotSupported(refPath.Child("kind"), ref.Kind, kinds))
	}
	if ref.Name == "" {
		errs = append(errs, field.Required(refPath.Child("name"), ""))
	} else {
		for _, msg := range rbacName(ref.Name, false) {
			errs = append(errs, field.Invalid(refPath.Child("name"), ref.Name, msg))
		}
	}
	for i, s := range subjects {
		errs = append(errs, validateSubject(s, namespaced, field.NewPath("subjects").Index(i))...)
	}
	return errs
}

func validateSubject(s rbacv1.Subject, namespaced bool, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	}
	switch s.Kind {
	case rbacv1.ServiceAccountKind:
		if s.Name != "" {
			for _, msg := range apivalidation.ValidateServiceAccountName(s.Name, false) {
				errs = append(errs, field.Invalid(p.Child("name"), s.Name, msg))
			}
		}
		if s.APIGroup != "" {
			errs = append(errs, field.NotSupported(p.Child("apiGroup"), s.APIGroup, []string{""}))
		}
		if !namespaced && s.Namespace == "" {
			errs = append(errs, field.Required(p.Child("namespace"), ""))
		}
	case rbacv1.UserKind, rbacv1.GroupKind:
		if s.APIGroup != rbacv1.GroupName {
			errs = append(errs, field.NotSupported(p.Child("apiGroup"), s.APIGroup, []string{rbacv1.GroupName}))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("kind"), s.Kind, []string{rbacv1.ServiceAccountKind, rbacv1.UserKind, rbacv1.GroupKind}))
	}
	return errs
}

// validateRoleRefUpdate: a binding's role reference never changes (delete
// and recreate the binding instead).
func validateRoleRefUpdate(ref, old rbacv1.RoleRef) field.ErrorList {
	if ref != old {
		return field.ErrorList{field.Invalid(field.NewPath("roleRef"), ref, "cannot change roleRef")}
	}
	return nil
}
