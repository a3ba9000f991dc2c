// Package quota is ResourceQuota's object-count arithmetic, as
// kube-apiserver's quota admission and kube-controller-manager's quota
// controller do it: which quota names a create is charged to, charging a
// quota (status.used plus one, refused beyond spec.hard), and the 403
// that refuses it.
//
// Only object counts are evaluated: count/<resource> (core group),
// count/<resource>.<group>, and the core names Kubernetes counts objects
// under (configmaps, secrets, pods, services, replicationcontrollers,
// resourcequotas, persistentvolumeclaims). Other names (cpu, memory,
// requests.storage, ...) are kept in status.hard and never charged.
package quota

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// legacyNames are the core resources Kubernetes also counts under their
// bare plural name.
var legacyNames = map[string]bool{
	"configmaps": true, "secrets": true, "pods": true, "services": true,
	"replicationcontrollers": true, "resourcequotas": true, "persistentvolumeclaims": true,
}

// Names returns the quota resource names one object of gr counts under:
// count/<resource>[.<group>], and the bare plural for the legacy core
// resources.
func Names(gr schema.GroupResource) []corev1.ResourceName {
	if gr.Group == "" {
		names := []corev1.ResourceName{corev1.ResourceName("count/" + gr.Resource)}
		if legacyNames[gr.Resource] {
			names = append(names, corev1.ResourceName(gr.Resource))
		}
		return names
	}
	return []corev1.ResourceName{corev1.ResourceName("count/" + gr.Resource + "." + gr.Group)}
}

// Counted returns the group and resource whose objects name counts, and
// false for a name that is not an object count.
func Counted(name corev1.ResourceName) (schema.GroupResource, bool) {
	n := string(name)
	if legacyNames[n] {
		return schema.GroupResource{Resource: n}, true
	}
	rest, ok := strings.CutPrefix(n, "count/")
	if !ok || rest == "" {
		return schema.GroupResource{}, false
	}
	res, group, _ := strings.Cut(rest, ".")
	return schema.GroupResource{Group: group, Resource: res}, true
}

// Limits reports whether q's spec.hard limits any of names.
func Limits(q *corev1.ResourceQuota, names []corev1.ResourceName) bool {
	for _, n := range names {
		if _, ok := q.Spec.Hard[n]; ok {
			return true
		}
	}
	return false
}

// Charge adds one object to q's status.used for each of names that its
// spec.hard limits, or returns the 403 Forbidden kube-apiserver answers
// (exceeded quota: <name>, requested: ..., used: ..., limited: ...) when
// one would go past hard; gr and objName name the object refused. A
// limited name missing from status.used is refused as "status unknown",
// as kube-apiserver refuses before the controller has computed the quota
// (callers fill status.used with Status first). It reports whether q
// changed.
func Charge(q *corev1.ResourceQuota, names []corev1.ResourceName, gr schema.GroupResource, objName string) (bool, error) {
	var limited []corev1.ResourceName
	for _, n := range names {
		if _, ok := q.Spec.Hard[n]; ok {
			limited = append(limited, n)
		}
	}
	if len(limited) == 0 {
		return false, nil
	}
	var unknown, exceeded []corev1.ResourceName
	for _, n := range limited {
		used, ok := q.Status.Used[n]
		if !ok {
			unknown = append(unknown, n)
			continue
		}
		hard := q.Spec.Hard[n]
		next := used.DeepCopy()
		next.Add(*resource.NewQuantity(1, resource.DecimalSI))
		if next.Cmp(hard) > 0 {
			exceeded = append(exceeded, n)
		}
	}
	if len(unknown) > 0 {
		return false, apierrors.NewForbidden(gr, objName, fmt.Errorf("status unknown for quota: %s, resources: %s", q.Name, join(unknown)))
	}
	if len(exceeded) > 0 {
		var req, used, lim []string
		for _, n := range exceeded {
			u, h := q.Status.Used[n], q.Spec.Hard[n]
			req = append(req, fmt.Sprintf("%s=1", n))
			used = append(used, fmt.Sprintf("%s=%s", n, u.String()))
			lim = append(lim, fmt.Sprintf("%s=%s", n, h.String()))
		}
		return false, apierrors.NewForbidden(gr, objName, fmt.Errorf("exceeded quota: %s, requested: %s, used: %s, limited: %s",
			q.Name, strings.Join(req, ","), strings.Join(used, ","), strings.Join(lim, ",")))
	}
	for _, n := range limited {
		used := q.Status.Used[n]
		used.Add(*resource.NewQuantity(1, resource.DecimalSI))
		q.Status.Used[n] = used
	}
	return true, nil
}

// Status returns q's status computed from counts: hard is spec.hard, and
// used holds count(gr) for every object-count name hard limits (count
// answers 0 for a resource that is not served).
func Status(q *corev1.ResourceQuota, count func(gr schema.GroupResource) (int64, error)) (corev1.ResourceQuotaStatus, error) {
	st := corev1.ResourceQuotaStatus{Hard: corev1.ResourceList{}, Used: corev1.ResourceList{}}
	for n, h := range q.Spec.Hard {
		st.Hard[n] = h.DeepCopy()
		gr, ok := Counted(n)
		if !ok {
			continue
		}
		c, err := count(gr)
		if err != nil {
			return corev1.ResourceQuotaStatus{}, fmt.Errorf("quota %s: counting %s: %w", q.Name, gr, err)
		}
		st.Used[n] = *resource.NewQuantity(c, resource.DecimalSI)
	}
	return st, nil
}

func join(names []corev1.ResourceName) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = string(n)
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}
