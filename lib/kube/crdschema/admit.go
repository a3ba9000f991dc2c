package crdschema

import (
	"context"
	"fmt"
	"math"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structurallisttype "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	schemaobjectmeta "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/cel/common"
)

// Values of the fieldValidation query parameter.
const (
	FieldValidationIgnore = metav1.FieldValidationIgnore
	FieldValidationWarn   = metav1.FieldValidationWarn
	FieldValidationStrict = metav1.FieldValidationStrict
)

// Admit prepares obj for storage and validates it, as kube-apiserver does
// for a custom resource on create (old nil) and update: it prunes fields
// the schema does not know, drops nulls of non-nullable fields without a
// default, applies defaults, then validates type meta, object meta, the
// OpenAPI schema (ratcheting unchanged invalid values on update), embedded
// resources, list-type invariants, the scale subresource's paths and the
// x-kubernetes-validations rules within one runtime cost budget
// (celenv.RuntimeBudget). obj is changed in place; old is not.
//
// Pruned fields are reported per fieldValidation, with upstream's text
// `unknown field "spec.foo"`: as warnings under Warn (and ""), not at all
// under Ignore, and under Strict as errors (Origin "strictDecoding")
// returned alone, before any validation, as kube-apiserver rejects a
// strictly decoded request. Metadata that does not decode as ObjectMeta
// is one error (Origin "decoding"), also returned alone. StatusError
// turns both into upstream's 400 and everything else into a 422.
//
// Admit is safe for concurrent use.
func (s *Schema) Admit(ctx context.Context, obj, old *unstructured.Unstructured, fieldValidation string) (warnings []string, errs field.ErrorList) {
	if obj == nil || obj.Object == nil {
		return nil, field.ErrorList{field.Required(nil, "an object is required")}
	}
	warnings, errs = s.pruneAndDefault(obj, fieldValidation)
	if len(errs) > 0 {
		return nil, errs
	}
	warnings = append(warnings, finalizerWarnings(obj, old)...)
	return warnings, s.validate(ctx, obj, old)
}

// pruneAndDefault prunes obj, reports what it pruned per fieldValidation
// (warnings, or under Strict the errors that end the admission), and
// applies defaults.
func (s *Schema) pruneAndDefault(obj *unstructured.Unstructured, fieldValidation string) (warnings []string, errs field.ErrorList) {
	strict := fieldValidation == FieldValidationStrict
	track := strict || fieldValidation == FieldValidationWarn || fieldValidation == ""
	unknown, err := s.prune(obj, track)
	if err != nil {
		return nil, field.ErrorList{s.decodeError(err)}
	}
	if strict && len(unknown) > 0 {
		return nil, unknownFieldErrors(unknown)
	}
	for _, p := range unknown {
		warnings = append(warnings, unknownFieldMessage(p))
	}
	s.applyDefaults(obj)
	return warnings, nil
}

// AdmitStatus is Admit for a write through the status subresource: obj is
// pruned and defaulted as a whole, but only .status is validated against
// the schema, with the metadata and the scale subresource's status paths,
// and the CEL rules of the whole object run, as upstream.
func (s *Schema) AdmitStatus(ctx context.Context, obj, old *unstructured.Unstructured, fieldValidation string) (warnings []string, errs field.ErrorList) {
	if obj == nil || obj.Object == nil || old == nil || old.Object == nil {
		return nil, field.ErrorList{field.Required(nil, "an object and its stored version are required")}
	}
	warnings, errs = s.pruneAndDefault(obj, fieldValidation)
	if len(errs) > 0 {
		return nil, errs
	}
	if errs := s.validateTypeMeta(obj); len(errs) > 0 {
		return warnings, errs
	}
	errs = append(errs, s.validateObjectMeta(ctx, obj, old)...)
	var opts []apiservervalidation.ValidationOption
	var celOpts []cel.Option
	if s.structural != nil {
		correlated := common.NewCorrelatedObject(obj.Object, old.Object, &model.Structural{Structural: s.structural})
		opts = append(opts, apiservervalidation.WithRatcheting(correlated.Key("status")))
		celOpts = append(celOpts, cel.WithRatcheting(correlated))
	}
	// statusPass stands for statusValidator when it is sure: valid on
	// create implies valid with ratcheting (see passSchema).
	if status, ok := obj.Object["status"]; ok && s.statusValidator != nil && !s.statusPass.pass(status) {
		errs = append(errs, apiservervalidation.ValidateCustomResourceUpdate(field.NewPath("status"), status, old.Object["status"], s.statusValidator, opts...)...)
	}
	errs = append(errs, s.validateScaleStatus(obj)...)
	errs = append(errs, s.validateEmbeddedAndLists(ctx, obj, old)...)
	return warnings, append(errs, s.validateRules(ctx, obj, old, errs, celOpts)...)
}

// DefaultOnRead prepares an object read from storage as upstream's
// storage decoder does, with the schema of the version it is stored in:
// fields the schema no longer knows are pruned (metadata of embedded
// resources included, malformed fields there dropped rather than failing
// the read), a missing metadata.generation becomes 1, and defaults are
// applied (a default added to the CRD after the object was written shows
// on read; it is not written back).
//
// The resource's own metadata is not round-tripped through
// metav1.ObjectMeta as upstream's decoder does: every stored custom
// resource was admitted (Admit or AdmitStatus), which did that on write,
// and the round trip (a JSON encoding and decoding) would be most of the
// CPU of a read.
func (s *Schema) DefaultOnRead(obj *unstructured.Unstructured) {
	if obj == nil || obj.Object == nil {
		return
	}
	if s.structural != nil {
		if !s.preserveUnknownFields {
			prunePaths(obj.Object, s.structural, false)
			if hasNull(obj.Object) {
				structuraldefaulting.PruneNonNullableNullsWithoutDefaults(obj.Object, s.structural)
			}
		}
		if s.hasEmbedded {
			// With DropInvalidFields the coercion drops what it cannot
			// decode and returns no error.
			_, _ = schemaobjectmeta.CoerceWithOptions(nil, obj.Object, s.structural, false, schemaobjectmeta.CoerceOptions{DropInvalidFields: true})
		}
	}
	if _, ok := obj.Object["metadata"].(map[string]any); ok && obj.GetGeneration() == 0 {
		obj.SetGeneration(1)
	}
	s.applyDefaults(obj)
}

// applyDefaults applies the schema's defaults to obj.
func (s *Schema) applyDefaults(obj *unstructured.Unstructured) {
	if s.structural != nil && s.hasDefaults {
		structuraldefaulting.Default(obj.Object, s.structural)
	}
}

// hasNull reports whether a JSON value holds a null anywhere; without one
// dropping nulls of non-nullable fields is skipped.
func hasNull(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case map[string]any:
		for _, x := range v {
			if hasNull(x) {
				return true
			}
		}
	case []any:
		for _, x := range v {
			if hasNull(x) {
				return true
			}
		}
	}
	return false
}

// prune drops fields the schema does not know, in the resource, its
// metadata and embedded resources, and returns their paths when track is
// set; malformed metadata is an error.
//
// It follows upstream's schema-coercing decoder: apiVersion, kind and
// metadata are set aside and restored, metadata round-tripped through
// metav1.ObjectMeta unless it is already in the form the round trip
// returns (canonicalMetadata).
func (s *Schema) prune(obj *unstructured.Unstructured, track bool) ([]string, error) {
	kind, hasKind := obj.Object["kind"]
	apiVersion, hasAPIVersion := obj.Object["apiVersion"]
	var meta *metav1.ObjectMeta
	var hasMeta bool
	var unknown []string
	if !canonicalMetadata(obj.Object["metadata"]) {
		var err error
		meta, hasMeta, unknown, err = schemaobjectmeta.GetObjectMetaWithOptions(obj.Object, schemaobjectmeta.ObjectMetaOptions{ReturnUnknownFieldPaths: track})
		if err != nil {
			return nil, err
		}
	}
	if s.structural != nil {
		if !s.preserveUnknownFields {
			unknown = append(unknown, prunePaths(obj.Object, s.structural, track)...)
			if hasNull(obj.Object) {
				structuraldefaulting.PruneNonNullableNullsWithoutDefaults(obj.Object, s.structural)
			}
		}
		if s.hasEmbedded {
			ferr, paths := schemaobjectmeta.CoerceWithOptions(nil, obj.Object, s.structural, false, schemaobjectmeta.CoerceOptions{ReturnUnknownFieldPaths: track})
			if ferr != nil {
				return nil, ferr
			}
			unknown = append(unknown, paths...)
		}
	}
	if hasKind {
		obj.Object["kind"] = kind
	}
	if hasAPIVersion {
		obj.Object["apiVersion"] = apiVersion
	}
	if hasMeta {
		if err := schemaobjectmeta.SetObjectMeta(obj.Object, meta); err != nil {
			return nil, fmt.Errorf("setting metadata: %w", err)
		}
	}
	return unknown, nil
}

// validate runs the checks of upstream's customResourceStrategy Validate
// (old nil) or ValidateUpdate, in its order.
func (s *Schema) validate(ctx context.Context, obj, old *unstructured.Unstructured) field.ErrorList {
	if errs := s.validateTypeMeta(obj); len(errs) > 0 {
		return errs
	}
	errs := s.validateObjectMeta(ctx, obj, old)
	var celOpts []cel.Option
	// s.pass stands for upstream's validator when it is sure the object
	// is valid; valid on create implies valid on update with ratcheting
	// (see passSchema), so it serves both.
	passed := s.pass.pass(obj.Object)
	if old == nil {
		if !passed {
			errs = append(errs, apiservervalidation.ValidateCustomResource(nil, obj.Object, s.validator)...)
		}
	} else {
		var opts []apiservervalidation.ValidationOption
		if s.structural != nil {
			// Ratcheting: a value that was invalid and did not change
			// stays accepted, so tightening a schema does not block
			// unrelated updates.
			correlated := common.NewCorrelatedObject(obj.Object, old.Object, &model.Structural{Structural: s.structural})
			opts = append(opts, apiservervalidation.WithRatcheting(correlated))
			celOpts = append(celOpts, cel.WithRatcheting(correlated))
		}
		if !passed {
			errs = append(errs, apiservervalidation.ValidateCustomResourceUpdate(nil, obj.Object, old.Object, s.validator, opts...)...)
		}
	}
	errs = append(errs, s.validateScaleSpec(obj)...)
	errs = append(errs, s.validateScaleStatus(obj)...)
	errs = append(errs, s.validateEmbeddedAndLists(ctx, obj, old)...)
	return append(errs, s.validateRules(ctx, obj, old, errs, celOpts)...)
}

// validateEmbeddedAndLists checks the metadata of embedded resources and
// the x-kubernetes-list-type set/map invariants; on update the list
// invariants ratchet as a whole (checked only when old satisfied them).
func (s *Schema) validateEmbeddedAndLists(ctx context.Context, obj, old *unstructured.Unstructured) field.ErrorList {
	if s.structural == nil {
		return nil
	}
	var errs field.ErrorList
	if s.hasEmbedded {
		errs = schemaobjectmeta.Validate(ctx, nil, obj.Object, s.structural, false)
	}
	if !s.hasListSetsOrMaps {
		return errs
	}
	if old == nil || len(structurallisttype.ValidateListSetsAndMaps(nil, s.structural, old.Object)) == 0 {
		errs = append(errs, structurallisttype.ValidateListSetsAndMaps(nil, s.structural, obj.Object)...)
	}
	return errs
}

// validateRules runs the x-kubernetes-validations rules within the
// per-request runtime budget, unless errs already holds an error that
// makes the rules' input untrustworthy (a missing, mistyped or oversized
// value), in which case it reports that the rules were not run.
func (s *Schema) validateRules(ctx context.Context, obj, old *unstructured.Unstructured, errs field.ErrorList, opts []cel.Option) field.ErrorList {
	if s.celValidator == nil {
		return nil
	}
	for _, e := range errs {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return field.ErrorList{field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation")}
		}
	}
	var oldMap map[string]any
	var oldObj any
	if old != nil {
		oldMap, oldObj = old.Object, old.Object
	}
	if s.rules != nil && s.rules.pass(ctx, obj.Object, oldMap, s.budget) {
		return nil
	}
	ruleErrs, _ := s.celValidator.Validate(ctx, nil, s.structural, obj.Object, oldObj, s.budget, opts...)
	return ruleErrs
}

// validateTypeMeta checks apiVersion and kind name this schema's kind.
func (s *Schema) validateTypeMeta(obj *unstructured.Unstructured) field.ErrorList {
	var errs field.ErrorList
	if kind := obj.GetKind(); kind != s.gvk.Kind {
		errs = append(errs, field.Invalid(field.NewPath("kind"), kind, fmt.Sprintf("must be %v", s.gvk.Kind)))
	}
	if want := s.gvk.GroupVersion().String(); obj.GetAPIVersion() != want {
		errs = append(errs, field.Invalid(field.NewPath("apiVersion"), obj.GetAPIVersion(), fmt.Sprintf("must be %v", want)))
	}
	return errs
}

// validateObjectMeta validates metadata as for every kind: name (a DNS
// subdomain), namespace per scope, labels, annotations, owner references,
// finalizers, and on update the immutable fields.
func (s *Schema) validateObjectMeta(ctx context.Context, obj, old *unstructured.Unstructured) field.ErrorList {
	path := field.NewPath("metadata")
	if old == nil {
		return apimachineryvalidation.ValidateObjectMetaAccessor(obj, s.namespaced, apimachineryvalidation.NameIsDNSSubdomain, path)
	}
	return apimachineryvalidation.ValidateObjectMetaAccessorUpdate(obj, old, path)
}

// validateScaleSpec checks the scale subresource's spec replicas path
// holds a non-negative int32 when set.
func (s *Schema) validateScaleSpec(obj *unstructured.Unstructured) field.ErrorList {
	if s.scale == nil {
		return nil
	}
	return validateReplicas(obj, s.scale.SpecReplicasPath)
}

// validateScaleStatus checks the scale subresource's status replicas path
// holds a non-negative int32 and its label selector path a string.
func (s *Schema) validateScaleStatus(obj *unstructured.Unstructured) field.ErrorList {
	if s.scale == nil {
		return nil
	}
	errs := validateReplicas(obj, s.scale.StatusReplicasPath)
	if s.scale.LabelSelectorPath != nil {
		p := strings.TrimPrefix(*s.scale.LabelSelectorPath, ".")
		if v, _, err := unstructured.NestedString(obj.Object, strings.Split(p, ".")...); err != nil {
			errs = append(errs, field.Invalid(field.NewPath(*s.scale.LabelSelectorPath), v, err.Error()))
		}
	}
	return errs
}

// validateReplicas checks the integer at the JSON path (".spec.replicas")
// of a scale subresource, with upstream's messages.
func validateReplicas(obj *unstructured.Unstructured, path string) field.ErrorList {
	p := strings.TrimPrefix(path, ".")
	n, _, err := unstructured.NestedInt64(obj.Object, strings.Split(p, ".")...)
	switch {
	case err != nil:
		return field.ErrorList{field.Invalid(field.NewPath(path), n, err.Error())}
	case n < 0:
		return field.ErrorList{field.Invalid(field.NewPath(path), n, "should be a non-negative integer")}
	case n > math.MaxInt32:
		return field.ErrorList{field.Invalid(field.NewPath(path), n, fmt.Sprintf("should be less than or equal to %v", math.MaxInt32))}
	}
	return nil
}
