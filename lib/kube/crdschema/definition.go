package crdschema

import (
	"context"
	"fmt"
	"slices"

	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidateDefinition checks a CRD being created (old nil) or updated as
// kube-apiserver does, with its error texts: metadata.name is
// <plural>.<group>; names; versions with exactly one storage version;
// conversion; subresources; printer columns; selectable fields; the
// openAPIV3Schema of every version is structural, with valid formats,
// types, defaults (pruned and valid against the schema) and
// x-kubernetes-* extensions used where they are allowed; every
// x-kubernetes-validations rule and messageExpression compiles in the
// shared CEL environment and stays within the estimated-cost limits per
// expression and per CRD (celenv.PerCallLimit, StaticEstimatedCRDCostLimit);
// transition rules (oldSelf) only where an old value can be correlated.
// On update, names of an established CRD are immutable, and expressions
// and schemas that did not change are not re-checked (ratcheting).
//
// crd is validated as it will be stored: v1 defaults applied and status
// prepared (PrepareForCreate or PrepareForUpdate) on a copy, so the caller
// may validate before or after preparing; neither argument is changed.
func ValidateDefinition(ctx context.Context, crd, old *apiextensionsv1.CustomResourceDefinition) field.ErrorList {
	in := defaulted(crd)
	var oldIn *apiextensionsv1.CustomResourceDefinition
	if old == nil {
		PrepareForCreate(in)
	} else {
		oldIn = defaulted(old)
		PrepareForUpdate(in, oldIn)
	}
	internal, err := toInternal(in)
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	if oldIn == nil {
		return validation.ValidateCustomResourceDefinition(ctx, internal)
	}
	oldInternal, err := toInternal(oldIn)
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	return validation.ValidateCustomResourceDefinitionUpdate(ctx, internal, oldInternal)
}

// ValidateDefinitionStatus checks a write through a CRD's status
// subresource (conditions, accepted names, storedVersions naming defined
// versions and including the storage version).
func ValidateDefinitionStatus(ctx context.Context, crd, old *apiextensionsv1.CustomResourceDefinition) field.ErrorList {
	internal, err := toInternal(defaulted(crd))
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	oldInternal, err := toInternal(defaulted(old))
	if err != nil {
		return field.ErrorList{field.InternalError(nil, err)}
	}
	return validation.ValidateUpdateCustomResourceDefinitionStatus(ctx, internal, oldInternal)
}

// StaticEstimatedCRDCostLimit is the limit on the sum of the estimated
// costs of all x-kubernetes-validations rules of one CRD version, with
// each rule's cost multiplied by how many times it can run (the maximum
// cardinality of the lists and maps above it).
const StaticEstimatedCRDCostLimit = validation.StaticEstimatedCRDCostLimit

// PrepareForCreate sets what the server owns on a new CRD, as upstream:
// the status is cleared and status.storedVersions names the storage
// version. (metadata.generation is the caller's, as for every kind.)
func PrepareForCreate(crd *apiextensionsv1.CustomResourceDefinition) {
	crd.Status = apiextensionsv1.CustomResourceDefinitionStatus{}
	addStorageVersion(crd)
}

// PrepareForUpdate keeps the stored status on a write of a CRD's spec and
// adds a new storage version to status.storedVersions, as upstream. It
// reports whether the spec changed (the caller bumps
// metadata.generation).
func PrepareForUpdate(crd, old *apiextensionsv1.CustomResourceDefinition) (specChanged bool) {
	crd.Status = *old.Status.DeepCopy()
	addStorageVersion(crd)
	return !equality.Semantic.DeepEqual(crd.Spec, old.Spec)
}

// addStorageVersion appends the storage version to storedVersions unless
// it is there.
func addStorageVersion(crd *apiextensionsv1.CustomResourceDefinition) {
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			if !slices.Contains(crd.Status.StoredVersions, v.Name) {
				crd.Status.StoredVersions = append(crd.Status.StoredVersions, v.Name)
			}
			return
		}
	}
}

// toInternal converts a v1 CRD to the internal type the apiextensions
// validation works on.
func toInternal(crd *apiextensionsv1.CustomResourceDefinition) (*apiextensions.CustomResourceDefinition, error) {
	out := &apiextensions.CustomResourceDefinition{}
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(crd, out, nil); err != nil {
		return nil, fmt.Errorf("crdschema: converting %s to the internal version: %w", crd.Name, err)
	}
	return out, nil
}
