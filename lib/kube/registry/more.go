package registry

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// EventTTL is how long Events live: they are attached to store leases and
// expire on their own, as kube-apiserver's --event-ttl (default 1h) does.
const EventTTL = time.Hour

// ServiceAccounts, Events and Leases: what controllers, Helm and client-go
// leader election need beyond the first kinds.
func ServiceAccounts() *Resource {
	return &Resource{
		GVR: corev1.SchemeGroupVersion.WithResource("serviceaccounts"), Kind: "ServiceAccount", ListKind: "ServiceAccountList",
		SingularName: "serviceaccount", ShortNames: []string{"sa"}, Namespaced: true, Verbs: CRUDVerbs,
		New: func() runtime.Object { return &corev1.ServiceAccount{} }, NewList: func() runtime.Object { return &corev1.ServiceAccountList{} },
		Strategy: metaOnlyStrategy{nameFn: apivalidation.NameIsDNSSubdomain},
		Columns: []Column{{
			Definition: metav1.TableColumnDefinition{Name: "Secrets", Type: "integer", Description: "Number of secrets"},
			Cell:       func(obj runtime.Object, _ time.Time) any { return int64(len(obj.(*corev1.ServiceAccount).Secrets)) },
		}, AgeColumn},
	}
}

// CoreEvents are core/v1 events.
func CoreEvents() *Resource {
	return &Resource{
		GVR: corev1.SchemeGroupVersion.WithResource("events"), Kind: "Event", ListKind: "EventList",
		SingularName: "event", ShortNames: []string{"ev"}, Namespaced: true, Verbs: CRUDVerbs,
		New: func() runtime.Object { return &corev1.Event{} }, NewList: func() runtime.Object { return &corev1.EventList{} },
		Strategy: metaOnlyStrategy{nameFn: apivalidation.NameIsDNSSubdomain},
		TTL:      EventTTL,
		Columns: []Column{{
			Definition: metav1.TableColumnDefinition{Name: "Type", Type: "string", Description: "Type of this event"},
			Cell:       func(obj runtime.Object, _ time.Time) any { return obj.(*corev1.Event).Type },
		}, {
			Definition: metav1.TableColumnDefinition{Name: "Reason", Type: "string", Description: "Why the action was taken"},
			Cell:       func(obj runtime.Object, _ time.Time) any { return obj.(*corev1.Event).Reason },
		}, {
			Definition: metav1.TableColumnDefinition{Name: "Object", Type: "string", Description: "The object this event is about"},
			Cell: func(obj runtime.Object, _ time.Time) any {
				r := obj.(*corev1.Event).InvolvedObject
				return lowerKind(r.Kind) + "/" + r.Name
			},
		}, {
			Definition: metav1.TableColumnDefinition{Name: "Message", Type: "string", Description: "A human-readable description"},
			Cell:       func(obj runtime.Object, _ time.Time) any { return obj.(*corev1.Event).Message },
		}},
		Fields: func(obj runtime.Object) map[string]string {
			e, _ := obj.(*corev1.Event)
			if e == nil {
				e = &corev1.Event{}
			}
			return map[string]string{
				"involvedObject.kind": e.InvolvedObject.Kind, "involvedObject.namespace": e.InvolvedObject.Namespace,
				"involvedObject.name": e.InvolvedObject.Name, "involvedObject.uid": string(e.InvolvedObject.UID),
				"involvedObject.apiVersion": e.InvolvedObject.APIVersion, "involvedObject.resourceVersion": e.InvolvedObject.ResourceVersion,
				"involvedObject.fieldPath": e.InvolvedObject.FieldPath, "reason": e.Reason, "reportingComponent": e.ReportingController,
				"source": e.Source.Component, "type": e.Type,
			}
		},
	}
}

// Events are events.k8s.io/v1 events (the same objects as core/v1 events
// in kube-apiserver; here a resource of their own).
func Events() *Resource {
	return &Resource{
		GVR: eventsv1.SchemeGroupVersion.WithResource("events"), Kind: "Event", ListKind: "EventList",
		SingularName: "event", ShortNames: []string{"ev"}, Namespaced: true, Verbs: CRUDVerbs,
		New: func() runtime.Object { return &eventsv1.Event{} }, NewList: func() runtime.Object { return &eventsv1.EventList{} },
		Strategy: metaOnlyStrategy{nameFn: apivalidation.NameIsDNSSubdomain},
		TTL:      EventTTL,
	}
}

// Leases are coordination.k8s.io/v1 leases, which client-go's leader
// election takes and renews.
func Leases() *Resource {
	return &Resource{
		GVR: coordinationv1.SchemeGroupVersion.WithResource("leases"), Kind: "Lease", ListKind: "LeaseList",
		SingularName: "lease", Namespaced: true, Verbs: CRUDVerbs,
		New: func() runtime.Object { return &coordinationv1.Lease{} }, NewList: func() runtime.Object { return &coordinationv1.LeaseList{} },
		Strategy: metaOnlyStrategy{nameFn: apivalidation.NameIsDNSSubdomain},
		Columns: []Column{{
			Definition: metav1.TableColumnDefinition{Name: "Holder", Type: "string", Description: "The holder of the lease"},
			Cell: func(obj runtime.Object, _ time.Time) any {
				if h := obj.(*coordinationv1.Lease).Spec.HolderIdentity; h != nil {
					return *h
				}
				return ""
			},
		}, AgeColumn},
	}
}

// Standard is every built-in resource meridian serves.
func Standard() []*Resource {
	standard := append(Core(), ServiceAccounts(), CoreEvents(), Events(), Leases(), ResourceQuotas())
	standard = append(standard, RBAC()...)
	standard = append(standard, FlowControl()...)
	standard = append(standard, CustomResourceDefinitions())
	standard = append(standard, AdmissionRegistration()...)
	return standard
}

// metaOnlyStrategy validates only metadata: for kinds whose spec
// kube-apiserver validates lightly or not at all.
type metaOnlyStrategy struct {
	nameFn apivalidation.ValidateNameFunc
}

func (metaOnlyStrategy) PrepareForCreate(runtime.Object)          {}
func (metaOnlyStrategy) PrepareForUpdate(obj, old runtime.Object) {}

func (s metaOnlyStrategy) Validate(obj runtime.Object) field.ErrorList {
	a := obj.(metav1.Object)
	return apivalidation.ValidateObjectMetaAccessor(a, true, s.nameFn, field.NewPath("metadata"))
}

func (s metaOnlyStrategy) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	errs := apivalidation.ValidateObjectMetaAccessorUpdate(obj.(metav1.Object), old.(metav1.Object), field.NewPath("metadata"))
	return append(errs, s.Validate(obj)...)
}

func lowerKind(k string) string {
	b := []byte(k)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
