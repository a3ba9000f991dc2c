package registry

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Core returns the core/v1 resources served today.
func Core() []*Resource {
	gv := corev1.SchemeGroupVersion
	return []*Resource{
		{
			GVR: gv.WithResource("namespaces"), Kind: "Namespace", ListKind: "NamespaceList",
			SingularName: "namespace", ShortNames: []string{"ns"},
			Verbs: []string{"create", "delete", "get", "list", "patch", "update", "watch"},
			New:   func() runtime.Object { return &corev1.Namespace{} }, NewList: func() runtime.Object { return &corev1.NamespaceList{} },
			Strategy:     namespaceStrategy{},
			Subresources: []string{"status", "finalize"},
			Columns: []Column{{
				Definition: metav1.TableColumnDefinition{Name: "Status", Type: "string", Description: "The status of the namespace"},
				Cell:       func(obj runtime.Object, _ time.Time) any { return string(obj.(*corev1.Namespace).Status.Phase) },
			}, AgeColumn},
			Fields: func(obj runtime.Object) map[string]string {
				if ns, ok := obj.(*corev1.Namespace); ok {
					return map[string]string{"status.phase": string(ns.Status.Phase)}
				}
				return map[string]string{"status.phase": ""}
			},
		},
		{
			GVR: gv.WithResource("configmaps"), Kind: "ConfigMap", ListKind: "ConfigMapList",
			SingularName: "configmap", ShortNames: []string{"cm"}, Namespaced: true, Verbs: CRUDVerbs,
			New: func() runtime.Object { return &corev1.ConfigMap{} }, NewList: func() runtime.Object { return &corev1.ConfigMapList{} },
			Strategy: configMapStrategy{},
			Columns: []Column{{
				Definition: metav1.TableColumnDefinition{Name: "Data", Type: "string", Description: "Number of keys"},
				Cell: func(obj runtime.Object, _ time.Time) any {
					cm := obj.(*corev1.ConfigMap)
					return int64(len(cm.Data) + len(cm.BinaryData))
				},
			}, AgeColumn},
		},
		{
			GVR: gv.WithResource("secrets"), Kind: "Secret", ListKind: "SecretList",
			SingularName: "secret", Namespaced: true, Verbs: CRUDVerbs,
			New: func() runtime.Object { return &corev1.Secret{} }, NewList: func() runtime.Object { return &corev1.SecretList{} },
			Strategy: secretStrategy{},
			Columns: []Column{{
				Definition: metav1.TableColumnDefinition{Name: "Type", Type: "string", Description: "The type of the secret"},
				Cell:       func(obj runtime.Object, _ time.Time) any { return string(obj.(*corev1.Secret).Type) },
			}, {
				Definition: metav1.TableColumnDefinition{Name: "Data", Type: "string", Description: "Number of keys"},
				Cell:       func(obj runtime.Object, _ time.Time) any { return int64(len(obj.(*corev1.Secret).Data)) },
			}, AgeColumn},
			Fields: func(obj runtime.Object) map[string]string {
				if s, ok := obj.(*corev1.Secret); ok {
					return map[string]string{"type": string(s.Type)}
				}
				return map[string]string{"type": ""}
			},
		},
	}
}

// AgeColumn is kubectl's AGE column.
var AgeColumn = Column{
	Definition: metav1.TableColumnDefinition{Name: "Age", Type: "string", Description: "CreationTimestamp is the time the object was created."},
	Cell: func(obj runtime.Object, now time.Time) any {
		a, err := meta.Accessor(obj)
		if err != nil {
			return "<unknown>"
		}
		ts := a.GetCreationTimestamp()
		if ts.IsZero() {
			return "<unknown>"
		}
		return duration.HumanDuration(now.Sub(ts.Time))
	},
}

type namespaceStrategy struct{}

func (namespaceStrategy) PrepareForCreate(obj runtime.Object) {
	ns := obj.(*corev1.Namespace)
	ns.Status = corev1.NamespaceStatus{Phase: corev1.NamespaceActive}
	// The namespace controller removes this finalizer once a deleted
	// namespace is empty.
	if !slices.Contains(ns.Spec.Finalizers, corev1.FinalizerKubernetes) {
		ns.Spec.Finalizers = append(ns.Spec.Finalizers, corev1.FinalizerKubernetes)
	}
	setNameLabel(ns)
}

func (namespaceStrategy) PrepareForUpdate(obj, old runtime.Object) {
	ns, oldNS := obj.(*corev1.Namespace), old.(*corev1.Namespace)
	// Status is written through the status subresource only, spec
	// finalizers through finalize.
	ns.Status = oldNS.Status
	ns.Spec.Finalizers = oldNS.Spec.Finalizers
	setNameLabel(ns)
}

// setNameLabel sets the immutable kubernetes.io/metadata.name label that
// kube-apiserver puts on every namespace, so selectors can name one.
func setNameLabel(ns *corev1.Namespace) {
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels[corev1.LabelMetadataName] = ns.Name
}

// PrepareForSubresourceUpdate: status writes change only the status (and
// not the metadata a status writer may not touch, as kube-apiserver's
// status strategies reset it); finalize writes change only
// spec.finalizers.
func (namespaceStrategy) PrepareForSubresourceUpdate(sub string, obj, old runtime.Object) bool {
	ns, oldNS := obj.(*corev1.Namespace), old.(*corev1.Namespace)
	switch sub {
	case "status":
		ns.Spec = oldNS.Spec
		metav1.ResetObjectMetaForStatus(&ns.ObjectMeta, &oldNS.ObjectMeta)
	case "finalize":
		finalizers := ns.Spec.Finalizers
		keep := oldNS.DeepCopy()
		keep.Spec.Finalizers = finalizers
		keep.ResourceVersion = ns.ResourceVersion
		*ns = *keep
	default:
		return false
	}
	return true
}

func (namespaceStrategy) Validate(obj runtime.Object) field.ErrorList {
	ns := obj.(*corev1.Namespace)
	return apivalidation.ValidateObjectMeta(&ns.ObjectMeta, false, apivalidation.NameIsDNSLabel, field.NewPath("metadata"))
}

func (s namespaceStrategy) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	ns, oldNS := obj.(*corev1.Namespace), old.(*corev1.Namespace)
	errs := apivalidation.ValidateObjectMetaUpdate(&ns.ObjectMeta, &oldNS.ObjectMeta, field.NewPath("metadata"))
	return append(errs, s.Validate(obj)...)
}

type configMapStrategy struct{}

func (configMapStrategy) PrepareForCreate(runtime.Object)          {}
func (configMapStrategy) PrepareForUpdate(obj, old runtime.Object) {}

func (configMapStrategy) Validate(obj runtime.Object) field.ErrorList {
	cm := obj.(*corev1.ConfigMap)
	errs := apivalidation.ValidateObjectMeta(&cm.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	dataErrs, dataSize := validateDataKeys(cm.Data, field.NewPath("data"))
	binaryErrs, binarySize := validateDataKeys(cm.BinaryData, field.NewPath("binaryData"))
	errs = append(append(errs, dataErrs...), binaryErrs...)
	for k := range cm.Data {
		if _, dup := cm.BinaryData[k]; dup {
			errs = append(errs, field.Invalid(field.NewPath("data").Key(k), k, "duplicate of key present in binaryData"))
		}
	}
	if dataSize+binarySize > corev1.MaxSecretSize {
		errs = append(errs, field.TooLong(field.NewPath(""), "", corev1.MaxSecretSize))
	}
	return errs
}

func (s configMapStrategy) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	cm, oldCM := obj.(*corev1.ConfigMap), old.(*corev1.ConfigMap)
	errs := apivalidation.ValidateObjectMetaUpdate(&cm.ObjectMeta, &oldCM.ObjectMeta, field.NewPath("metadata"))
	errs = append(errs, validateImmutable(cm.Immutable, oldCM.Immutable, func() bool {
		return equalStrings(cm.Data, oldCM.Data) && equalBytes(cm.BinaryData, oldCM.BinaryData)
	})...)
	return append(errs, s.Validate(obj)...)
}

type secretStrategy struct{}

// PrepareForCreate folds stringData into data and defaults the type, as
// kube-apiserver does.
func (secretStrategy) PrepareForCreate(obj runtime.Object) { foldStringData(obj.(*corev1.Secret)) }

func (secretStrategy) PrepareForUpdate(obj, old runtime.Object) { foldStringData(obj.(*corev1.Secret)) }

func foldStringData(s *corev1.Secret) {
	if s.Type == "" {
		s.Type = corev1.SecretTypeOpaque
	}
	if len(s.StringData) > 0 && s.Data == nil {
		s.Data = map[string][]byte{}
	}
	for k, v := range s.StringData {
		s.Data[k] = []byte(v)
	}
	s.StringData = nil
}

func (secretStrategy) Validate(obj runtime.Object) field.ErrorList {
	s := obj.(*corev1.Secret)
	errs := apivalidation.ValidateObjectMeta(&s.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	dataErrs, total := validateDataKeys(s.Data, field.NewPath("data"))
	errs = append(errs, dataErrs...)
	if total > corev1.MaxSecretSize {
		errs = append(errs, field.TooLong(field.NewPath("data"), "", corev1.MaxSecretSize))
	}
	return errs
}

func (s secretStrategy) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	sec, oldSec := obj.(*corev1.Secret), old.(*corev1.Secret)
	errs := apivalidation.ValidateObjectMetaUpdate(&sec.ObjectMeta, &oldSec.ObjectMeta, field.NewPath("metadata"))
	if sec.Type != oldSec.Type {
		errs = append(errs, field.Invalid(field.NewPath("type"), sec.Type, "field is immutable"))
	}
	errs = append(errs, validateImmutable(sec.Immutable, oldSec.Immutable, func() bool { return equalBytes(sec.Data, oldSec.Data) })...)
	return append(errs, s.Validate(obj)...)
}

// validateDataKeys checks that every key of data, a ConfigMap's or a
// Secret's, is a valid key (reported under path) and returns the total
// size of the values, which together may not exceed corev1.MaxSecretSize.
func validateDataKeys[V string | []byte](data map[string]V, path *field.Path) (field.ErrorList, int) {
	var errs field.ErrorList
	total := 0
	for k, v := range data {
		for _, msg := range validation.IsConfigMapKey(k) {
			errs = append(errs, field.Invalid(path.Key(k), k, msg))
		}
		total += len(v)
	}
	return errs, total
}

// validateImmutable refuses an update of an object that was immutable
// (old) unless it stays immutable (now) and its data does not change
// (sameData, called only then), as kube-apiserver does for ConfigMaps and
// Secrets.
func validateImmutable(now, old *bool, sameData func() bool) field.ErrorList {
	if old == nil || !*old {
		return nil
	}
	var errs field.ErrorList
	if now == nil || !*now {
		errs = append(errs, field.Forbidden(field.NewPath("immutable"), "field is immutable when `immutable` is set"))
	}
	if !sameData() {
		errs = append(errs, field.Forbidden(field.NewPath("data"), "field is immutable when `immutable` is set"))
	}
	return errs
}

func equalStrings(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func equalBytes(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || string(w) != string(v) {
			return false
		}
	}
	return true
}
