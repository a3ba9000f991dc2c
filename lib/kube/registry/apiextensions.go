package registry

import (
	"fmt"
	"slices"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// CRDCleanupFinalizer is the finalizer every CRD gets: the CRD controller
// removes it once every custom resource of the CRD is deleted.
const CRDCleanupFinalizer = "customresourcecleanup.apiextensions.k8s.io"

// CRDApprovalAnnotation marks a CRD in a protected group (*.k8s.io,
// *.kubernetes.io) as approved, as kube-apiserver requires.
const CRDApprovalAnnotation = "api-approved.kubernetes.io"

// CustomResourceDefinitions is apiextensions.k8s.io/v1
// customresourcedefinitions, with status written by the CRD controller.
func CustomResourceDefinitions() *Resource {
	return &Resource{
		GVR: apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"), Kind: "CustomResourceDefinition", ListKind: "CustomResourceDefinitionList",
		SingularName: "customresourcedefinition", ShortNames: []string{"crd", "crds"}, Categories: []string{"api-extensions"}, Verbs: CRUDVerbs,
		New:          func() runtime.Object { return &apiextensionsv1.CustomResourceDefinition{} },
		NewList:      func() runtime.Object { return &apiextensionsv1.CustomResourceDefinitionList{} },
		Strategy:     crdStrategy{},
		Subresources: []string{"status"},
		Columns: []Column{{
			Definition: metav1.TableColumnDefinition{Name: "Created At", Type: "date", Description: "The time the object was created."},
			Cell: func(obj runtime.Object, _ time.Time) any {
				return obj.(*apiextensionsv1.CustomResourceDefinition).CreationTimestamp.UTC().Format(time.RFC3339)
			},
		}},
	}
}

type crdStrategy struct{}

var _ SubresourceStrategy = crdStrategy{}

func (crdStrategy) PrepareForCreate(obj runtime.Object) {
	crd := obj.(*apiextensionsv1.CustomResourceDefinition)
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(crd)
	crd.Status = apiextensionsv1.CustomResourceDefinitionStatus{StoredVersions: []string{}}
	crd.Generation = 1
	// The CRD controller removes it once the deleted CRD's objects are
	// gone (kube-apiserver adds it when the CRD is deleted; here it is
	// there from the start, so a delete needs no special path).
	if !slices.Contains(crd.Finalizers, CRDCleanupFinalizer) {
		crd.Finalizers = append(crd.Finalizers, CRDCleanupFinalizer)
	}
}

func (crdStrategy) PrepareForUpdate(obj, old runtime.Object) {
	crd, oldCRD := obj.(*apiextensionsv1.CustomResourceDefinition), old.(*apiextensionsv1.CustomResourceDefinition)
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(crd)
	crd.Status = oldCRD.Status
	crd.Generation = oldCRD.Generation
	if !apiequality.Semantic.DeepEqual(crd.Spec, oldCRD.Spec) {
		crd.Generation++
	}
}

// PrepareForSubresourceUpdate: status writes change only the status.
func (crdStrategy) PrepareForSubresourceUpdate(sub string, obj, old runtime.Object) bool {
	if sub != "status" {
		return false
	}
	crd, oldCRD := obj.(*apiextensionsv1.CustomResourceDefinition), old.(*apiextensionsv1.CustomResourceDefinition)
	crd.Spec = oldCRD.Spec
	metav1.ResetObjectMetaForStatus(&crd.ObjectMeta, &oldCRD.ObjectMeta)
	return true
}

func (crdStrategy) Validate(obj runtime.Object) field.ErrorList {
	return ValidateCRD(obj.(*apiextensionsv1.CustomResourceDefinition))
}

func (crdStrategy) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	crd, oldCRD := obj.(*apiextensionsv1.CustomResourceDefinition), old.(*apiextensionsv1.CustomResourceDefinition)
	errs := apivalidation.ValidateObjectMetaUpdate(&crd.ObjectMeta, &oldCRD.ObjectMeta, field.NewPath("metadata"))
	spec := field.NewPath("spec")
	if crd.Spec.Group != oldCRD.Spec.Group {
		errs = append(errs, field.Invalid(spec.Child("group"), crd.Spec.Group, "field is immutable"))
	}
	if crd.Spec.Scope != oldCRD.Spec.Scope {
		errs = append(errs, field.Invalid(spec.Child("scope"), crd.Spec.Scope, "field is immutable"))
	}
	if crd.Spec.Names.Plural != oldCRD.Spec.Names.Plural {
		errs = append(errs, field.Invalid(spec.Child("names", "plural"), crd.Spec.Names.Plural, "field is immutable"))
	}
	// A stored version may stop being served only once it is out of
	// storedVersions; it may not leave spec.versions while stored.
	for _, sv := range crd.Status.StoredVersions {
		found := false
		for _, v := range crd.Spec.Versions {
			found = found || v.Name == sv
		}
		if !found {
			errs = append(errs, field.Invalid(field.NewPath("status", "storedVersions"), crd.Status.StoredVersions, fmt.Sprintf("must have the same version %q in spec.versions", sv)))
		}
	}
	return append(errs, ValidateCRD(crd)...)
}

// ValidateCRD checks what a CRD must be to be served, beyond its schema:
// its name (plural.group), group (a DNS subdomain with a dot, outside the
// built-in groups unless approved), scope, names and versions (one
// storage version, unique DNS-label names).
func ValidateCRD(crd *apiextensionsv1.CustomResourceDefinition) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&crd.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	spec := field.NewPath("spec")
	names := crd.Spec.Names
	if want := names.Plural + "." + crd.Spec.Group; crd.Name != want {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), crd.Name, fmt.Sprintf("must be spec.names.plural+\".\"+spec.group")))
	}
	switch g := crd.Spec.Group; {
	case g == "":
		errs = append(errs, field.Required(spec.Child("group"), ""))
	case len(utilvalidation.IsDNS1123Subdomain(g)) > 0:
		errs = append(errs, field.Invalid(spec.Child("group"), g, strings.Join(utilvalidation.IsDNS1123Subdomain(g), ",")))
	case !strings.Contains(g, "."):
		errs = append(errs, field.Invalid(spec.Child("group"), g, "should be a domain with at least one dot"))
	case protectedGroup(g) && crd.Annotations[CRDApprovalAnnotation] == "":
		errs = append(errs, field.Invalid(field.NewPath("metadata", "annotations").Key(CRDApprovalAnnotation), "",
			fmt.Sprintf("protected groups must have approval annotation %q, see https://github.com/kubernetes/enhancements/pull/1111", CRDApprovalAnnotation)))
	}
	switch crd.Spec.Scope {
	case apiextensionsv1.NamespaceScoped, apiextensionsv1.ClusterScoped:
	case "":
		errs = append(errs, field.Required(spec.Child("scope"), ""))
	default:
		errs = append(errs, field.NotSupported(spec.Child("scope"), crd.Spec.Scope, []string{string(apiextensionsv1.ClusterScoped), string(apiextensionsv1.NamespaceScoped)}))
	}
	np := spec.Child("names")
	for _, n := range []struct {
		path, value string
		required    bool
	}{{"plural", names.Plural, true}, {"singular", names.Singular, false}, {"kind", names.Kind, true}, {"listKind", names.ListKind, false}} {
		switch {
		case n.value == "" && n.required:
			errs = append(errs, field.Required(np.Child(n.path), ""))
		case n.value == "":
		case n.path == "kind" || n.path == "listKind":
			if msgs := utilvalidation.IsDNS1035Label(strings.ToLower(n.value)); len(msgs) > 0 {
				errs = append(errs, field.Invalid(np.Child(n.path), n.value, strings.Join(msgs, ",")))
			}
		default:
			if msgs := utilvalidation.IsDNS1035Label(n.value); len(msgs) > 0 {
				errs = append(errs, field.Invalid(np.Child(n.path), n.value, strings.Join(msgs, ",")))
			}
		}
	}
	if names.Kind != "" && names.Kind == names.ListKind {
		errs = append(errs, field.Invalid(np.Child("listKind"), names.ListKind, "kind and listKind may not be the same"))
	}
	for i, s := range names.ShortNames {
		if msgs := utilvalidation.IsDNS1035Label(s); len(msgs) > 0 {
			errs = append(errs, field.Invalid(np.Child("shortNames").Index(i), s, strings.Join(msgs, ",")))
		}
	}
	vp := spec.Child("versions")
	if len(crd.Spec.Versions) == 0 {
		errs = append(errs, field.Invalid(vp, crd.Spec.Versions, "must have exactly one version marked as storage version"))
	}
	storage, seen := 0, map[string]bool{}
	for i, v := range crd.Spec.Versions {
		if v.Storage {
			storage++
		}
		if seen[v.Name] {
			errs = append(errs, field.Invalid(vp.Index(i).Child("name"), v.Name, "must be unique"))
		}
		seen[v.Name] = true
		if msgs := utilvalidation.IsDNS1035Label(v.Name); len(msgs) > 0 {
			errs = append(errs, field.Invalid(vp.Index(i).Child("name"), v.Name, strings.Join(msgs, ",")))
		}
	}
	if len(crd.Spec.Versions) > 0 && storage != 1 {
		errs = append(errs, field.Invalid(vp, crd.Spec.Versions, "must have exactly one version marked as storage version"))
	}
	if c := crd.Spec.Conversion; c != nil {
		switch c.Strategy {
		case apiextensionsv1.NoneConverter:
		case apiextensionsv1.WebhookConverter:
			errs = append(errs, field.NotSupported(spec.Child("conversion", "strategy"), c.Strategy, []string{string(apiextensionsv1.NoneConverter)}))
		default:
			errs = append(errs, field.NotSupported(spec.Child("conversion", "strategy"), c.Strategy, []string{string(apiextensionsv1.NoneConverter), string(apiextensionsv1.WebhookConverter)}))
		}
	}
	return errs
}

// protectedGroup reports whether group is one of Kubernetes' own
// (kube-apiserver's apihelpers.IsProtectedCommunityGroup): the built-in
// kinds live there, so a CRD there could clash with one.
func protectedGroup(group string) bool {
	return group == "k8s.io" || strings.HasSuffix(group, ".k8s.io") || group == "kubernetes.io" || strings.HasSuffix(group, ".kubernetes.io")
}
