package registry

import (
	"context"
	"slices"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/crdschema"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// CRDCleanupFinalizer is the finalizer every CRD gets: the CRD controller
// removes it once every custom resource of the CRD is deleted.
const CRDCleanupFinalizer = "customresourcecleanup.apiextensions.k8s.io"

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
	crdschema.PrepareForCreate(crd)
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
	crd.Generation = oldCRD.Generation
	if crdschema.PrepareForUpdate(crd, oldCRD) {
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

// Validate checks a new CRD as kube-apiserver does (crdschema: names,
// versions, the structural schema, CEL rules and their cost, the
// conversion strategy and its webhook's client config).
func (crdStrategy) Validate(obj runtime.Object) field.ErrorList {
	crd := obj.(*apiextensionsv1.CustomResourceDefinition)
	return crdschema.ValidateDefinition(context.Background(), crd, nil)
}

func (crdStrategy) ValidateUpdate(obj, old runtime.Object) field.ErrorList {
	crd, oldCRD := obj.(*apiextensionsv1.CustomResourceDefinition), old.(*apiextensionsv1.CustomResourceDefinition)
	return crdschema.ValidateDefinition(context.Background(), crd, oldCRD)
}
