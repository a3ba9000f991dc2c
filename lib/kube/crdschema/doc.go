// Package crdschema is everything meridian does with a
// CustomResourceDefinition's schema: it checks a CRD when it is written
// (ValidateDefinition), compiles one version's schema (Compile) and admits
// custom resources against it (Schema.Admit: prune unknown fields, apply
// defaults, validate, run x-kubernetes-validations CEL rules), applies
// defaults to objects read from storage (Schema.DefaultOnRead), and derives
// the server-side apply type converter (TypeConverter) and the OpenAPI
// documents (OpenAPIV3, OpenAPIV2) a CRD publishes.
//
// # What comes from k8s.io/apiextensions-apiserver, and why
//
// The semantics of CRD schemas are defined by kube-apiserver's
// apiextensions-apiserver; meridian imports its schema packages as libraries
// so a schema means the same thing here, error text included. Only these
// packages are imported, none of its server, registry or storage layers:
//
//   - pkg/apis/apiextensions (+ v1): the internal CRD types the schema
//     packages work on, v1 defaulting and the v1→internal conversion.
//   - pkg/apis/apiextensions/validation: ValidateCustomResourceDefinition and
//     its Update variant — names, versions and the single storage version,
//     structural-schema rules, x-kubernetes-* extension checks, default
//     validation, CEL rule compilation and the estimated-cost limits per
//     rule and per CRD, transition-rule placement.
//   - pkg/apihelpers: which schema and subresources apply to a version.
//   - pkg/apiserver/schema: the structural schema type.
//   - pkg/apiserver/schema/pruning: dropping unknown fields and reporting
//     their paths (for fieldValidation=Warn|Strict).
//   - pkg/apiserver/schema/defaulting: applying defaults, dropping nulls
//     of non-nullable fields, pruning defaults of the schema itself.
//   - pkg/apiserver/schema/objectmeta: metadata of the resource and of
//     x-kubernetes-embedded-resource objects (coercion and validation).
//   - pkg/apiserver/schema/listtype: the set/map list invariants.
//   - pkg/apiserver/schema/cel: the x-kubernetes-validations validator
//     (self, oldSelf, optionalOldSelf, messageExpression, reason, fieldPath,
//     runtime cost budget).
//   - pkg/apiserver/validation: the OpenAPI schema validator with
//     ratcheting on update, and the go-openapi schema it is built from.
//     Admit asks it only for the errors: passSchema, compiled once per
//     Schema from that same go-openapi schema with kube-openapi's own
//     format registry and number-bound functions, first decides whether
//     an object is certainly valid (upstream's validator builds a
//     validator per field on every call).
//   - pkg/controller/openapi/v2: the conversion of a structural schema to
//     what OpenAPI v2 can express; pkg/generated/openapi: the metav1 and
//     autoscaling/v1 definitions the published documents refer to.
//
// The CRD strategy of pkg/registry/customresource is not imported (it
// brings the generic registry and storage); Admit repeats its order of
// checks in a few lines instead. Nor is the openapi builder of
// pkg/controller/openapi/builder (it needs the generic API server's
// endpoint installer and go-restful); OpenAPIV3 and OpenAPIV2 build the
// same definitions and paths directly.
//
// # Objects
//
// Admit, AdmitStatus and DefaultOnRead take objects as
// k8s.io/apimachinery's JSON decoding produces them (integers as int64,
// as unstructured.Unstructured.UnmarshalJSON or util/json give them); the
// validators and CEL treat a float64 where an integer belongs as a type
// error.
//
// # CEL environment
//
// Every CRD rule compiles in meridian's one CEL environment,
// lib/kube/celenv. The apiextensions validators look up the Kubernetes base
// environment for the default compatibility version themselves; that is
// the very *environment.EnvSet celenv.Base returns (the library builds it
// once per process and caches it), so CRD rules and admission policies
// share one environment and one set of cost limits; a test asserts the
// identity.
package crdschema
