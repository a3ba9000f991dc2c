// This file follows k8s.io/apiserver v0.37.2's
// pkg/admission/plugin/policy/validating/typechecking.go (Copyright 2023
// The Kubernetes Authors, Apache License 2.0), the type checker
// kube-controller-manager's status controller runs. It is declared here
// because that package imports the generic policy plugin, client-go's
// clientset, informers and fake clientset, and with them client-go's
// scheme of every group and version, which would be linked into every
// binary holding the gateway.

package vapstatus

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/google/cel-go/cel"
	"github.com/meridian-cp/meridian/lib/kube/celenv"
	"github.com/meridian-cp/meridian/services/apigateway/internal/openapi"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/common"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/library"
	celopenapi "k8s.io/apiserver/pkg/cel/openapi"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// maxTypesToCheck bounds the kinds a policy is checked against.
const maxTypesToCheck = 10

// schemaResolver resolves a kind's OpenAPI schema, every reference
// inlined; an unknown kind's error wraps openapi.ErrSchemaNotFound.
// *openapi.SchemaResolver implements it.
type schemaResolver interface {
	ResolveSchema(gvk schema.GroupVersionKind) (*spec.Schema, error)
}

// typeChecker type-checks a policy's validations and message expressions
// against the schemas of the kinds its matchConstraints name (at most
// maxTypesToCheck, none for wildcards), with object and oldObject typed
// as the kind and params as the paramKind, as kube-apiserver's
// validating.TypeChecker.
type typeChecker struct {
	schemas    schemaResolver
	restMapper meta.RESTMapper
	logger     *slog.Logger
	// typeNames numbers the CEL type names of the kinds' schemas, which
	// must not clash between checks.
	typeNames atomic.Uint64
}

// typeCheckingContext is what a policy's expressions are checked with:
// the kinds and their CEL types, the params' kind and type (nil when
// unresolved) and the policy's variables.
type typeCheckingContext struct {
	gvks          []schema.GroupVersionKind
	declTypes     []*apiservercel.DeclType
	paramGVK      schema.GroupVersionKind
	paramDeclType *apiservercel.DeclType
	variables     []admissionregistrationv1.Variable
}

// typeCheckingResult is the outcome of checking an expression against one
// kind: the issues found (Issues) or an error that stopped the check
// (Err).
type typeCheckingResult struct {
	GVK    schema.GroupVersionKind
	Issues error
	Err    error
}

// String is the result as the warning text shows it.
func (r *typeCheckingResult) String() string {
	if r.Issues == nil && r.Err == nil {
		return ""
	}
	if r.Err != nil {
		return fmt.Sprintf("%v: type checking error: %v\n", r.GVK, r.Err)
	}
	return fmt.Sprintf("%v: %s\n", r.GVK, r.Issues)
}

type typeCheckingResults []*typeCheckingResult

// String is the warning: every result's text, one per line.
func (rs typeCheckingResults) String() string {
	var messages []string
	for _, r := range rs {
		if m := r.String(); m != "" {
			messages = append(messages, m)
		}
	}
	return strings.Join(messages, "\n")
}

// Check type-checks policy and returns its expression warnings (nil when
// there are none), for policy.status.typeChecking. The policy is not
// modified.
func (c *typeChecker) Check(policy *admissionregistrationv1.ValidatingAdmissionPolicy) []admissionregistrationv1.ExpressionWarning {
	ctx := c.createContext(policy)
	var warnings []admissionregistrationv1.ExpressionWarning
	fieldRef := field.NewPath("spec", "validations")
	for i, v := range policy.Spec.Validations {
		if results := c.checkExpression(ctx, v.Expression); len(results) != 0 {
			warnings = append(warnings, admissionregistrationv1.ExpressionWarning{
				FieldRef: fieldRef.Index(i).Child("expression").String(),
				Warning:  results.String(),
			})
		}
		if v.MessageExpression == "" {
			continue
		}
		if results := c.checkExpression(ctx, v.MessageExpression); len(results) != 0 {
			warnings = append(warnings, admissionregistrationv1.ExpressionWarning{
				FieldRef: fieldRef.Index(i).Child("messageExpression").String(),
				Warning:  results.String(),
			})
		}
	}
	return warnings
}

// createContext resolves the kinds policy is checked against and their
// schemas. A kind whose schema does not resolve is left out: type
// checking never changes what a policy does.
func (c *typeChecker) createContext(policy *admissionregistrationv1.ValidatingAdmissionPolicy) *typeCheckingContext {
	ctx := new(typeCheckingContext)
	for _, gvk := range c.typesToCheck(policy) {
		declType, err := c.declType(gvk)
		if err != nil {
			if !errors.Is(err, openapi.ErrSchemaNotFound) {
				c.logger.Debug("validatingadmissionpolicy type checking: schema resolution failed", "gvk", gvk, "error", err)
			}
			continue
		}
		ctx.gvks = append(ctx.gvks, gvk)
		ctx.declTypes = append(ctx.declTypes, declType)
	}
	ctx.paramGVK = paramsGVK(policy)
	paramsDeclType, err := c.declType(ctx.paramGVK)
	if err != nil {
		if !errors.Is(err, openapi.ErrSchemaNotFound) {
			c.logger.Debug("validatingadmissionpolicy type checking: params schema resolution failed", "gvk", ctx.paramGVK, "error", err)
		}
		paramsDeclType = nil
	}
	ctx.paramDeclType = paramsDeclType
	ctx.variables = policy.Spec.Variables
	return ctx
}

// compiler is the type-checking compiler of one kind: object and
// oldObject of type object, params of type params (dynamic when nil).
func (c *typeChecker) compiler(ctx *typeCheckingContext, object, params *apiservercel.DeclType) (*plugincel.CompositedCompiler, error) {
	envSet, err := buildEnvSet(!ctx.paramGVK.Empty(), object, params)
	if err != nil {
		return nil, err
	}
	compiler, err := plugincel.NewCompositedCompilerForTypeChecking(envSet)
	if err != nil {
		return nil, err
	}
	compiler.Compiler = &typeCheckingCompiler{compiler: compiler}
	return compiler, nil
}

// checkExpression type-checks expression against each kind of ctx, the
// policy's variables compiled first.
func (c *typeChecker) checkExpression(ctx *typeCheckingContext, expression string) typeCheckingResults {
	var results typeCheckingResults
	for i, gvk := range ctx.gvks {
		compiler, err := c.compiler(ctx, ctx.declTypes[i], ctx.paramDeclType)
		if err != nil {
			c.logger.Warn("validatingadmissionpolicy type checking: building the compiler failed", "gvk", gvk, "error", err)
			continue
		}
		options := plugincel.OptionalVariableDeclarations{HasParams: !ctx.paramGVK.Empty(), HasAuthorizer: true}
		vars := make([]plugincel.NamedExpressionAccessor, len(ctx.variables))
		for i, v := range ctx.variables {
			vars[i] = &namedExpression{name: v.Name, expression: v.Expression}
		}
		compiler.CompileAndStoreVariables(vars, options, environment.StoredExpressions)
		result := compiler.CompileCELExpression(anyExpression(expression), options, environment.StoredExpressions)
		if err := result.Error; err != nil {
			r := &typeCheckingResult{GVK: gvk}
			if err.Type == apiservercel.ErrorTypeInvalid {
				r.Issues = err
			} else {
				r.Err = err
			}
			results = append(results, r)
		}
	}
	return results
}

// anyExpression is an expression of any type.
type anyExpression string

func (e anyExpression) GetExpression() string    { return string(e) }
func (e anyExpression) ReturnTypes() []*cel.Type { return []*cel.Type{cel.AnyType} }

// namedExpression is a policy variable.
type namedExpression struct{ name, expression string }

func (v *namedExpression) GetName() string          { return v.name }
func (v *namedExpression) GetExpression() string    { return v.expression }
func (v *namedExpression) ReturnTypes() []*cel.Type { return []*cel.Type{cel.AnyType, cel.DynType} }

// declType is the CEL type of gvk's schema, under a name unique to this
// check; nil for no kind.
func (c *typeChecker) declType(gvk schema.GroupVersionKind) (*apiservercel.DeclType, error) {
	if gvk.Empty() {
		return nil, nil
	}
	s, err := c.schemas.ResolveSchema(gvk)
	if err != nil {
		return nil, err
	}
	declType := common.SchemaDeclType(&celopenapi.Schema{Schema: s}, true)
	if declType == nil {
		return nil, nil
	}
	return declType.MaybeAssignTypeName(fmt.Sprintf("%s%d", gvk.Kind, c.typeNames.Add(1))), nil
}

// paramsGVK is the policy's paramKind; empty without one or when its
// apiVersion does not parse.
func paramsGVK(policy *admissionregistrationv1.ValidatingAdmissionPolicy) schema.GroupVersionKind {
	if policy.Spec.ParamKind == nil {
		return schema.GroupVersionKind{}
	}
	gv, err := schema.ParseGroupVersion(policy.Spec.ParamKind.APIVersion)
	if err != nil {
		return schema.GroupVersionKind{}
	}
	return gv.WithKind(policy.Spec.ParamKind.Kind)
}

// typesToCheck are the kinds of the resources p's matchConstraints name,
// sorted by group, version and kind: none for a rule with a wildcard
// group or version, wildcard resources and subresources skipped, at most
// maxTypesToCheck.
func (c *typeChecker) typesToCheck(p *admissionregistrationv1.ValidatingAdmissionPolicy) []schema.GroupVersionKind {
	if p.Spec.MatchConstraints == nil || len(p.Spec.MatchConstraints.ResourceRules) == 0 {
		return nil
	}
	gvks := map[schema.GroupVersionKind]bool{}
	refreshed := false // the RESTMapper is reset at most once per policy
	for _, rule := range p.Spec.MatchConstraints.ResourceRules {
		groups := withoutWildcards(rule.APIGroups, "*")
		versions := withoutWildcards(rule.APIVersions, "*")
		resources := slices.DeleteFunc(slices.Clone(rule.Resources), func(r string) bool { return strings.ContainsAny(r, "*/") })
		if len(groups) == 0 || len(versions) == 0 || len(resources) == 0 {
			continue
		}
		slices.Sort(groups)
		slices.Sort(versions)
		slices.Sort(resources)
		count := 0
		for _, group := range groups {
			for _, version := range versions {
				for _, resource := range resources {
					gvr := schema.GroupVersionResource{Group: group, Version: version, Resource: resource}
					resolved, err := c.restMapper.KindsFor(gvr)
					if err != nil {
						if refreshed {
							continue
						}
						if r, ok := c.restMapper.(meta.ResettableRESTMapper); ok {
							r.Reset()
						}
						refreshed = true
						if resolved, err = c.restMapper.KindsFor(gvr); err != nil {
							continue
						}
					}
					for _, r := range resolved {
						if r.Empty() {
							continue
						}
						gvks[r] = true
						count++
						if count == maxTypesToCheck {
							return sortedGVKs(gvks)
						}
					}
				}
			}
		}
	}
	return sortedGVKs(gvks)
}

// withoutWildcards is values, or nil when any of them contains a wildcard
// character.
func withoutWildcards(values []string, wildcard string) []string {
	out := make([]string, 0, len(values))
	for _, v := range values {
		if strings.ContainsAny(v, wildcard) {
			return nil
		}
		out = append(out, v)
	}
	return out
}

// sortedGVKs are the kinds of set sorted by group, version and kind; nil
// when there are none.
func sortedGVKs(set map[schema.GroupVersionKind]bool) []schema.GroupVersionKind {
	if len(set) == 0 {
		return nil
	}
	list := make([]schema.GroupVersionKind, 0, len(set))
	for gvk := range set {
		list = append(list, gvk)
	}
	slices.SortFunc(list, func(a, b schema.GroupVersionKind) int {
		if c := strings.Compare(a.Group, b.Group); c != 0 {
			return c
		}
		if c := strings.Compare(a.Version, b.Version); c != 0 {
			return c
		}
		return strings.Compare(a.Kind, b.Kind)
	})
	return list
}

// buildEnvSet is the environment a policy's expressions are checked in:
// the base environment (celenv.Base) with namespaceObject, request,
// object and oldObject, params when the policy has a paramKind, and the
// authorizer, typed (object, params dynamic when nil).
func buildEnvSet(hasParams bool, object, params *apiservercel.DeclType) (*environment.EnvSet, error) {
	requestType := plugincel.BuildRequestType()
	namespaceType := plugincel.BuildNamespaceType()
	declTypes := []*apiservercel.DeclType{namespaceType, requestType}
	var varOpts []cel.EnvOption
	varOpts = append(varOpts, variableOpts(namespaceType, plugincel.NamespaceVarName)...)
	varOpts = append(varOpts, variableOpts(requestType, plugincel.RequestVarName)...)
	if object != nil {
		declTypes = append(declTypes, object)
	}
	varOpts = append(varOpts, variableOpts(object, plugincel.ObjectVarName, plugincel.OldObjectVarName)...)
	if hasParams {
		if params != nil {
			declTypes = append(declTypes, params)
		}
		varOpts = append(varOpts, variableOpts(params, plugincel.ParamsVarName)...)
	}
	varOpts = append(varOpts, cel.Variable("authorizer", library.AuthorizerType))
	return celenv.Base().Extend(environment.VersionedOptions{
		// Present at every compatibility version.
		IntroducedVersion: version.MajorMinor(1, 0),
		EnvOptions:        varOpts,
		DeclTypes:         declTypes,
	})
}

// variableOpts declares variables of declType (dynamic when nil).
func variableOpts(declType *apiservercel.DeclType, variables ...string) []cel.EnvOption {
	t := cel.DynType
	if declType != nil {
		t = declType.CelType()
	}
	opts := make([]cel.EnvOption, 0, len(variables))
	for _, v := range variables {
		opts = append(opts, cel.Variable(v, t))
	}
	return opts
}

// typeCheckingCompiler compiles an expression as plugincel's compiler
// does, except that object, oldObject and params are typed, the output
// type is not enforced and no program is built.
type typeCheckingCompiler struct {
	compiler *plugincel.CompositedCompiler
}

var _ plugincel.Compiler = (*typeCheckingCompiler)(nil)

// CompileCELExpression type-checks the expression; the result's Error is
// ErrorTypeInvalid for issues in the expression.
func (c *typeCheckingCompiler) CompileCELExpression(expressionAccessor plugincel.ExpressionAccessor, _ plugincel.OptionalVariableDeclarations, mode environment.Type) plugincel.CompilationResult {
	resultError := func(detail string, errType apiservercel.ErrorType) plugincel.CompilationResult {
		return plugincel.CompilationResult{
			Error:              &apiservercel.Error{Type: errType, Detail: detail},
			ExpressionAccessor: expressionAccessor,
		}
	}
	env, err := c.compiler.Env(mode)
	if err != nil {
		return resultError(fmt.Sprintf("fail to build env: %v", err), apiservercel.ErrorTypeInternal)
	}
	ast, issues := env.Compile(expressionAccessor.GetExpression())
	if issues != nil {
		return resultError(issues.String(), apiservercel.ErrorTypeInvalid)
	}
	return plugincel.CompilationResult{OutputType: ast.OutputType()}
}
