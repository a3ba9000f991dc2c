package crdschema

import (
	"errors"
	"fmt"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	crdvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/meridian-cp/meridian/lib/kube/celenv"
)

// ErrUnknownVersion is returned by Compile for a version the CRD does not
// define.
var ErrUnknownVersion = errors.New("crdschema: version not defined by the CustomResourceDefinition")

// Schema is one version of a CRD compiled for admission: its structural
// schema, OpenAPI validators and CEL rules. A Schema is immutable after
// Compile and safe for concurrent use; compile it once per CRD generation
// and version, not per request.
type Schema struct {
	gvk        schema.GroupVersionKind
	namespaced bool
	// preserveUnknownFields is the CRD's spec.preserveUnknownFields (only
	// ever true for CRDs migrated from v1beta1): nothing is pruned at the
	// root.
	preserveUnknownFields bool

	// structural is the version's schema with defaults pruned, as upstream
	// serves it; nil when the version has no schema.
	structural *structuralschema.Structural
	// validator checks the whole object; statusValidator checks
	// .status alone for the status subresource (nil without one).
	validator       apiservervalidation.SchemaValidator
	statusValidator apiservervalidation.SchemaValidator
	// pass and statusPass answer quickly that validator and
	// statusValidator find no error, before they are asked for the
	// errors; nil when there is no such validator or compileSchema
	// leaves the schema to it.
	pass, statusPass *passSchema
	// celValidator runs the x-kubernetes-validations rules; nil when the
	// schema has none.
	celValidator *cel.Validator
	// rules answers quickly that every rule holds, before celValidator
	// is asked for the errors; nil when celValidator is nil or the
	// schema has rules passRules does not cover.
	rules *passRules
	// budget is the runtime cost all rules may spend on one request:
	// celenv.RuntimeBudget (tests lower it).
	budget int64
	// scale is the version's scale subresource, nil without one.
	scale *apiextensions.CustomResourceSubresourceScale
	// hasStatus tells whether the version has a status subresource.
	hasStatus bool
	// hasDefaults and hasEmbedded tell whether the schema has a default
	// or an x-kubernetes-embedded-resource anywhere; without them the
	// defaulting and embedded-metadata walks change nothing and are
	// skipped (each walk copies the schema node of every field it visits).
	hasDefaults, hasEmbedded bool
	// hasListSetsOrMaps tells whether the schema has an
	// x-kubernetes-list-type of set or map anywhere; without one the
	// list invariants cannot fail and their walk of the object is
	// skipped.
	hasListSetsOrMaps bool
}

// GroupVersionKind is the kind the schema admits.
func (s *Schema) GroupVersionKind() schema.GroupVersionKind { return s.gvk }

// Structural is the version's structural schema (defaults pruned), nil
// when the version has none. Callers must not modify it.
func (s *Schema) Structural() *structuralschema.Structural { return s.structural }

// Compile compiles version of crd for admission. crd must have passed
// ValidateDefinition; a schema that is not structural is an error here.
// The kind is spec.names.kind (the accepted names of a CRD that is being
// served are the same). Compile defaults a copy of crd and leaves crd
// unchanged.
func Compile(crd *apiextensionsv1.CustomResourceDefinition, version string) (*Schema, error) {
	crd = defaulted(crd)
	var found bool
	for _, v := range crd.Spec.Versions {
		if v.Name == version {
			found = true
			break
		}
	}
	if !found {
		return nil, fmt.Errorf("%w: %q in %s", ErrUnknownVersion, version, crd.Name)
	}
	s := &Schema{
		gvk:                   schema.GroupVersionKind{Group: crd.Spec.Group, Version: version, Kind: crd.Spec.Names.Kind},
		namespaced:            crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
		preserveUnknownFields: crd.Spec.PreserveUnknownFields,
		budget:                celenv.RuntimeBudget,
	}

	validation, err := apihelpers.GetSchemaForVersion(crd, version)
	if err != nil {
		return nil, fmt.Errorf("crdschema: schema of %s %s: %w", crd.Name, version, err)
	}
	var internal *apiextensions.JSONSchemaProps
	if validation != nil && validation.OpenAPIV3Schema != nil {
		internal = &apiextensions.JSONSchemaProps{}
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(validation.OpenAPIV3Schema, internal, nil); err != nil {
			return nil, fmt.Errorf("crdschema: converting schema of %s %s: %w", crd.Name, version, err)
		}
		s.hasDefaults = crdvalidation.SchemaHas(internal, func(p *apiextensions.JSONSchemaProps) bool { return p.Default != nil })
		s.hasEmbedded = crdvalidation.SchemaHas(internal, func(p *apiextensions.JSONSchemaProps) bool { return p.XEmbeddedResource })
		s.hasListSetsOrMaps = crdvalidation.SchemaHas(internal, func(p *apiextensions.JSONSchemaProps) bool {
			return p.XListType != nil && (*p.XListType == "set" || *p.XListType == "map")
		})
		st, err := structuralschema.NewStructural(internal)
		if err != nil && !crd.Spec.PreserveUnknownFields {
			return nil, fmt.Errorf("crdschema: schema of %s %s is not structural: %w", crd.Name, version, err)
		}
		if st != nil {
			// NewStructural shares defaults with internal; PruneDefaults
			// changes them, so it works on a deep copy (as upstream).
			st = st.DeepCopy()
			if err := structuraldefaulting.PruneDefaults(st); err != nil {
				return nil, fmt.Errorf("crdschema: pruning defaults of %s %s: %w", crd.Name, version, err)
			}
			s.structural = st
		}
	}
	var openapi *spec.Schema
	if s.validator, openapi, err = apiservervalidation.NewSchemaValidator(internal); err != nil {
		return nil, fmt.Errorf("crdschema: validator of %s %s: %w", crd.Name, version, err)
	}
	s.pass = compileSchema(openapi)

	sub, err := apihelpers.GetSubresourcesForVersion(crd, version)
	if err != nil {
		return nil, fmt.Errorf("crdschema: subresources of %s %s: %w", crd.Name, version, err)
	}
	if sub != nil && sub.Status != nil {
		s.hasStatus = true
		if internal != nil {
			if status, ok := internal.Properties["status"]; ok {
				var statusOpenAPI *spec.Schema
				if s.statusValidator, statusOpenAPI, err = apiservervalidation.NewSchemaValidator(&status); err != nil {
					return nil, fmt.Errorf("crdschema: status validator of %s %s: %w", crd.Name, version, err)
				}
				s.statusPass = compileSchema(statusOpenAPI)
			}
		}
	}
	if sub != nil && sub.Scale != nil {
		s.scale = &apiextensions.CustomResourceSubresourceScale{}
		if err := apiextensionsv1.Convert_v1_CustomResourceSubresourceScale_To_apiextensions_CustomResourceSubresourceScale(sub.Scale, s.scale, nil); err != nil {
			return nil, fmt.Errorf("crdschema: scale subresource of %s %s: %w", crd.Name, version, err)
		}
	}

	if s.structural != nil {
		// NewValidator compiles the rules in the stored-expressions
		// environment of the base set for the default compatibility
		// version, which is celenv.Base(); it returns nil without rules.
		s.celValidator = cel.NewValidator(s.structural, true, celenv.PerCallLimit)
		if s.celValidator != nil {
			s.rules = compileRules(s.structural)
		}
	}
	return s, nil
}

// defaulted returns a deep copy of crd with the v1 API defaults applied
// (conversion strategy None, …), as the API server applies them when it
// decodes a CRD.
func defaulted(crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
	out := crd.DeepCopy()
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(out)
	return out
}

// SetDefaults applies the v1 API defaults to crd in place, as the API
// server does when it decodes a CRD on create and update; store the
// defaulted object.
func SetDefaults(crd *apiextensionsv1.CustomResourceDefinition) {
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(crd)
}
