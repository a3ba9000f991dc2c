package registry

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ResourceQuotas are core/v1 resourcequotas, namespaced, with a status
// subresource (status.hard and status.used, written by the quota
// controller). Only object counts are enforced (see lib/kube/quota);
// scopes and scope selectors are refused, since nothing here evaluates
// them.
func ResourceQuotas() *Resource {
	return &Resource{
		GVR: corev1.SchemeGroupVersion.WithResource("resourcequotas"), Kind: "ResourceQuota", ListKind: "ResourceQuotaList",
		SingularName: "resourcequota", ShortNames: []string{"quota"}, Namespaced: true, Verbs: CRUDVerbs,
		Subresources: []string{"status"},
		New:          func() runtime.Object { return &corev1.ResourceQuota{} }, NewList: func() runtime.Object { return &corev1.ResourceQuotaList{} },
		Strategy: resourceQuotaStrategy{},
		Columns: []Column{AgeColumn, {
			Definition: metav1.TableColumnDefinition{Name: "Request", Type: "string", Description: "Request represents a minimum amount of cpu/memory that a container may consume."},
			Cell:       func(obj runtime.Object, _ time.Time) any { return quotaColumn(obj.(*corev1.ResourceQuota), false) },
		}, {
			Definition: metav1.TableColumnDefinition{Name: "Limit", Type: "string", Description: "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node."},
			Cell:       func(obj runtime.Object, _ time.Time) any { return quotaColumn(obj.(*corev1.ResourceQuota), true) },
		}},
	}
}

// quotaColumn prints "name: used/hard" for the quota's limits.* names
// (limits) or the others, as kubectl's printer does.
func quotaColumn(q *corev1.ResourceQuota, limits bool) string {
	var names []string
	for name := range q.Status.Hard {
		if strings.HasPrefix(string(name), "limits.") == limits {
			names = append(names, string(name))
		}
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		hard, used := q.Status.Hard[corev1.ResourceName(n)], q.Status.Used[corev1.ResourceName(n)]
		parts = append(parts, fmt.Sprintf("%s: %s/%s", n, used.String(), hard.String()))
	}
	return strings.Join(parts, ", ")
}

type resourceQuotaStrategy struct{}

// PrepareForCreate clears the status: the quota controller writes it.
func (resourceQuotaStrategy) PrepareForCreate(obj runtime.Object) {
	obj.(*corev1.ResourceQuota).Status = corev1.ResourceQuotaStatus{}
}

// PrepareForUpdate keeps the stored status.
func (resourceQuotaStrategy) PrepareForUpdate(obj, old runtime.Object) {
	obj.(*corev1.ResourceQuota).Status = old.(*corev1.ResourceQuota).Status
}

// PrepareForSubresourceUpdate: a status write changes only the status.
func (resourceQuotaStrategy) PrepareForSubresourceUpdate(sub string, obj, old runtime.Object) bool {
	if sub != "status" {
		return false
	}
	q, oldQ := obj.(*corev1.ResourceQuota), old.(*corev1.ResourceQuota)
	q.Spec = oldQ.Spec
	metav1.ResetObjectMetaForStatus(&q.ObjectMeta, &oldQ.ObjectMeta)
	return true
}

func (resourceQuotaStrategy) Validate(obj runtime.Object) field.ErrorList {
	q := obj.(*corev1.ResourceQuota)
	errs := apivalidation.ValidateObjectMeta(&q.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return append(errs, validateQuota(q)...)
}

func (resourceQuotaStrategy) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	q, oldQ := obj.(*corev1.ResourceQuota), old.(*corev1.ResourceQuota)
	errs := apivalidation.ValidateObjectMetaUpdate(&q.ObjectMeta, &oldQ.ObjectMeta, field.NewPath("metadata"))
	if equality.Semantic.DeepEqual(q.Spec, oldQ.Spec) && equality.Semantic.DeepEqual(q.Status, oldQ.Status) {
		return errs
	}
	return append(errs, validateQuota(q)...)
}

// validateQuota checks spec.hard, status.hard and status.used as
// kube-apiserver does: qualified resource names, non-negative
// quantities; and refuses scopes, which meridian does not evaluate.
func validateQuota(q *corev1.ResourceQuota) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateQuotaList(q.Spec.Hard, field.NewPath("spec", "hard"))...)
	errs = append(errs, validateQuotaList(q.Status.Hard, field.NewPath("status", "hard"))...)
	errs = append(errs, validateQuotaList(q.Status.Used, field.NewPath("status", "used"))...)
	if len(q.Spec.Scopes) > 0 {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "scopes"), "quota scopes are not supported"))
	}
	if q.Spec.ScopeSelector != nil {
		errs = append(errs, field.Forbidden(field.NewPath("spec", "scopeSelector"), "quota scopes are not supported"))
	}
	return errs
}

func validateQuotaList(list corev1.ResourceList, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for name, qty := range list {
		p := path.Key(string(name))
		for _, msg := range validation.IsQualifiedName(strings.TrimPrefix(string(name), "count/")) {
			errs = append(errs, field.Invalid(p, string(name), msg))
		}
		if qty.Sign() < 0 {
			errs = append(errs, field.Invalid(p, qty.String(), "must be greater than or equal to 0"))
		}
		if strings.HasPrefix(string(name), "count/") && qty.Cmp(*resource.NewQuantity(qty.Value(), resource.DecimalSI)) != 0 {
			errs = append(errs, field.Invalid(p, qty.String(), "must be an integer"))
		}
	}
	return errs
}
