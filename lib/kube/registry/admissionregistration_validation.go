package registry

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	celgo "github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/meridian-cp/meridian/lib/kube/celenv"
)

// celExpression is one expression of a policy or webhook with the types it
// must evaluate to (those of kube-apiserver's admission plugins).
type celExpression struct {
	expr    string
	returns []*celgo.Type
}

func (e celExpression) GetExpression() string      { return e.expr }
func (e celExpression) ReturnTypes() []*celgo.Type { return e.returns }

// namedExpression is a policy variable: an expression with a name.
type namedExpression struct {
	celExpression
	name string
}

func (e namedExpression) GetName() string { return e.name }

// Return types of each kind of admission expression.
var (
	boolReturn       = []*celgo.Type{celgo.BoolType}
	stringReturn     = []*celgo.Type{celgo.StringType}
	annotationReturn = []*celgo.Type{celgo.StringType, celgo.NullType}
	anyReturn        = []*celgo.Type{celgo.AnyType, celgo.DynType}
	applyReturn      = []*celgo.Type{celgo.ObjectType("Object")}
	jsonPatchReturn  = []*celgo.Type{celgo.ListType(celgo.ObjectType("JSONPatch"))}
)

// expressionChecker compiles the expressions of one object against
// lib/kube/celenv as kube-apiserver's admission plugins will at runtime
// (the same variables: object, oldObject, request, namespaceObject,
// authorizer, params when a paramKind is set, variables). An expression
// already stored in the old object compiles against the stored
// environment, a new one against the environment for new expressions.
type expressionChecker struct {
	compiler *plugincel.CompositedCompiler
	opts     plugincel.OptionalVariableDeclarations
	old      sets.Set[string]
}

func newExpressionChecker(hasParams, patchTypes bool, old sets.Set[string]) (*expressionChecker, *field.Error) {
	c, err := plugincel.NewCompositedCompiler(celenv.Base())
	if err != nil {
		return nil, field.InternalError(field.NewPath("spec"), fmt.Errorf("building the CEL environment: %w", err))
	}
	return &expressionChecker{
		compiler: c,
		opts:     plugincel.OptionalVariableDeclarations{HasParams: hasParams, HasAuthorizer: true, HasPatchTypes: patchTypes},
		old:      old,
	}, nil
}

func (c *expressionChecker) mode(expr string) environment.Type {
	if c.old.Has(expr) {
		return environment.StoredExpressions
	}
	return environment.NewExpressions
}

// check compiles expr at fld.
func (c *expressionChecker) check(fld *field.Path, expr string, returns []*celgo.Type) field.ErrorList {
	if strings.TrimSpace(expr) == "" {
		return field.ErrorList{field.Required(fld, "")}
	}
	res := c.compiler.CompileCELExpression(celExpression{expr, returns}, c.opts, c.mode(expr))
	return celError(fld, expr, res.Error)
}

// variable compiles a variable and makes it visible to later expressions.
func (c *expressionChecker) variable(fld *field.Path, name, expr string) field.ErrorList {
	if strings.TrimSpace(expr) == "" {
		return field.ErrorList{field.Required(fld, "")}
	}
	res := c.compiler.CompileAndStoreVariable(namedExpression{celExpression{expr, anyReturn}, name}, c.opts, c.mode(expr))
	return celError(fld, expr, res.Error)
}

// celError turns a compilation error into a field error, as
// kube-apiserver's admissionregistration validation does.
func celError(fld *field.Path, expr string, e *apiservercel.Error) field.ErrorList {
	if e == nil {
		return nil
	}
	switch e.Type {
	case apiservercel.ErrorTypeRequired:
		return field.ErrorList{field.Required(fld, e.Detail)}
	case apiservercel.ErrorTypeInternal:
		return field.ErrorList{field.InternalError(fld, e)}
	default:
		return field.ErrorList{field.Invalid(fld, expr, e.Detail)}
	}
}

// cidentifier is what a variable name must be: a CEL identifier.
var cidentifier = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

func validateValidatingPolicy(p, old *admissionregistrationv1.ValidatingAdmissionPolicy) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&p.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	spec, fld := &p.Spec, field.NewPath("spec")
	var oldExprs sets.Set[string]
	if old != nil {
		oldExprs = validatingPolicyExpressions(&old.Spec)
	}
	errs = append(errs, validateParamKind(spec.ParamKind, fld.Child("paramKind"))...)
	if spec.MatchConstraints == nil {
		errs = append(errs, field.Required(fld.Child("matchConstraints"), ""))
	} else {
		errs = append(errs, validateMatchResources(spec.MatchConstraints, fld.Child("matchConstraints"), true)...)
	}
	errs = append(errs, validateFailurePolicy(spec.FailurePolicy, fld.Child("failurePolicy"))...)
	if len(spec.Validations) == 0 && len(spec.AuditAnnotations) == 0 {
		errs = append(errs, field.Required(fld.Child("validations"), "validations or auditAnnotations must contain at least one item"))
	}
	c, ferr := newExpressionChecker(spec.ParamKind != nil, false, oldExprs)
	if ferr != nil {
		return append(errs, ferr)
	}
	errs = append(errs, c.matchConditions(spec.MatchConditions, fld.Child("matchConditions"))...)
	errs = append(errs, c.variables(spec.Variables, fld.Child("variables"))...)
	for i, v := range spec.Validations {
		vf := fld.Child("validations").Index(i)
		errs = append(errs, c.check(vf.Child("expression"), v.Expression, boolReturn)...)
		if strings.ContainsAny(v.Message, "\r\n") {
			errs = append(errs, field.Invalid(vf.Child("message"), v.Message, "message must not contain line breaks"))
		}
		if len(strings.TrimSpace(v.Message)) == 0 && v.Message != "" {
			errs = append(errs, field.Invalid(vf.Child("message"), v.Message, "message must be non-empty if specified"))
		}
		if v.MessageExpression != "" {
			errs = append(errs, c.check(vf.Child("messageExpression"), v.MessageExpression, stringReturn)...)
		}
		if v.Reason != nil && !slices.Contains(validationReasons, *v.Reason) {
			errs = append(errs, field.NotSupported(vf.Child("reason"), *v.Reason, validationReasons))
		}
	}
	keys := sets.New[string]()
	for i, a := range spec.AuditAnnotations {
		af := fld.Child("auditAnnotations").Index(i)
		if a.Key == "" {
			errs = append(errs, field.Required(af.Child("key"), ""))
		} else {
			qualified := p.Name + "/" + a.Key
			for _, msg := range utilvalidation.IsQualifiedName(qualified) {
				errs = append(errs, field.Invalid(af.Child("key"), a.Key, msg))
			}
			if keys.Has(a.Key) {
				errs = append(errs, field.Duplicate(af.Child("key"), a.Key))
			}
			keys.Insert(a.Key)
		}
		errs = append(errs, c.check(af.Child("valueExpression"), a.ValueExpression, annotationReturn)...)
	}
	return errs
}

// validationReasons are the reasons a validation may give.
var validationReasons = []metav1.StatusReason{
	metav1.StatusReasonUnauthorized, metav1.StatusReasonForbidden, metav1.StatusReasonInvalid, metav1.StatusReasonRequestEntityTooLarge,
}

func (c *expressionChecker) matchConditions(mcs []admissionregistrationv1.MatchCondition, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := sets.New[string]()
	if len(mcs) > 64 {
		errs = append(errs, field.TooMany(fld, len(mcs), 64))
	}
	for i, mc := range mcs {
		mf := fld.Index(i)
		switch {
		case mc.Name == "":
			errs = append(errs, field.Required(mf.Child("name"), ""))
		case names.Has(mc.Name):
			errs = append(errs, field.Duplicate(mf.Child("name"), mc.Name))
		default:
			for _, msg := range utilvalidation.IsQualifiedName(mc.Name) {
				errs = append(errs, field.Invalid(mf.Child("name"), mc.Name, msg))
			}
		}
		names.Insert(mc.Name)
		errs = append(errs, c.check(mf.Child("expression"), mc.Expression, boolReturn)...)
	}
	return errs
}

func (c *expressionChecker) variables(vs []admissionregistrationv1.Variable, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := sets.New[string]()
	for i, v := range vs {
		vf := fld.Index(i)
		switch {
		case v.Name == "":
			errs = append(errs, field.Required(vf.Child("name"), ""))
		case !cidentifier.MatchString(v.Name):
			errs = append(errs, field.Invalid(vf.Child("name"), v.Name, "name is not a valid CEL identifier"))
		case names.Has(v.Name):
			errs = append(errs, field.Duplicate(vf.Child("name"), v.Name))
		}
		names.Insert(v.Name)
		errs = append(errs, c.variable(vf.Child("expression"), v.Name, v.Expression)...)
	}
	return errs
}

// validatingPolicyExpressions are every expression of a stored policy.
func validatingPolicyExpressions(s *admissionregistrationv1.ValidatingAdmissionPolicySpec) sets.Set[string] {
	out := sets.New[string]()
	for _, v := range s.Validations {
		out.Insert(v.Expression, v.MessageExpression)
	}
	for _, v := range s.Variables {
		out.Insert(v.Expression)
	}
	for _, m := range s.MatchConditions {
		out.Insert(m.Expression)
	}
	for _, a := range s.AuditAnnotations {
		out.Insert(a.ValueExpression)
	}
	return out
}

func validateParamKind(pk *admissionregistrationv1.ParamKind, fld *field.Path) field.ErrorList {
	if pk == nil {
		return nil
	}
	var errs field.ErrorList
	if pk.APIVersion == "" {
		errs = append(errs, field.Required(fld.Child("apiVersion"), ""))
	} else if gv, err := schema.ParseGroupVersion(pk.APIVersion); err != nil {
		errs = append(errs, field.Invalid(fld.Child("apiVersion"), pk.APIVersion, err.Error()))
	} else if gv.Version == "" {
		errs = append(errs, field.Invalid(fld.Child("apiVersion"), pk.APIVersion, "must specify a version"))
	}
	if pk.Kind == "" {
		errs = append(errs, field.Required(fld.Child("kind"), ""))
	}
	return errs
}

func validateFailurePolicy(fp *admissionregistrationv1.FailurePolicyType, fld *field.Path) field.ErrorList {
	if fp != nil && *fp != admissionregistrationv1.Fail && *fp != admissionregistrationv1.Ignore {
		return field.ErrorList{field.NotSupported(fld, *fp, []string{string(admissionregistrationv1.Fail), string(admissionregistrationv1.Ignore)})}
	}
	return nil
}

// validateMatchResources checks a policy's matchConstraints
// (requireRules: resourceRules required) or a binding's matchResources.
func validateMatchResources(m *admissionregistrationv1.MatchResources, fld *field.Path, requireRules bool) field.ErrorList {
	var errs field.ErrorList
	if requireRules && len(m.ResourceRules) == 0 {
		errs = append(errs, field.Required(fld.Child("resourceRules"), ""))
	}
	if mp := m.MatchPolicy; mp != nil && *mp != admissionregistrationv1.Exact && *mp != admissionregistrationv1.Equivalent {
		errs = append(errs, field.NotSupported(fld.Child("matchPolicy"), *mp, []string{string(admissionregistrationv1.Exact), string(admissionregistrationv1.Equivalent)}))
	}
	opts := metav1validation.LabelSelectorValidationOptions{}
	if m.NamespaceSelector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(m.NamespaceSelector, opts, fld.Child("namespaceSelector"))...)
	}
	if m.ObjectSelector != nil {
		errs = append(errs, metav1validation.ValidateLabelSelector(m.ObjectSelector, opts, fld.Child("objectSelector"))...)
	}
	for i, r := range m.ResourceRules {
		errs = append(errs, validateNamedRule(r, fld.Child("resourceRules").Index(i))...)
	}
	for i, r := range m.ExcludeResourceRules {
		errs = append(errs, validateNamedRule(r, fld.Child("excludeResourceRules").Index(i))...)
	}
	return errs
}

func validateNamedRule(r admissionregistrationv1.NamedRuleWithOperations, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, n := range r.ResourceNames {
		for _, msg := range apivalidation.NameIsDNSSubdomain(n, false) {
			errs = append(errs, field.Invalid(fld.Child("resourceNames").Index(i), n, msg))
		}
	}
	return append(errs, validateRuleWithOperations(r.RuleWithOperations, fld)...)
}

var operations = []string{"*", "CREATE", "UPDATE", "DELETE", "CONNECT"}

func validateRuleWithOperations(r admissionregistrationv1.RuleWithOperations, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(r.Operations) == 0 {
		errs = append(errs, field.Required(fld.Child("operations"), ""))
	}
	if len(r.Operations) > 1 && slices.Contains(r.Operations, admissionregistrationv1.OperationAll) {
		errs = append(errs, field.Invalid(fld.Child("operations"), r.Operations, "if '*' is present, must not specify other operations"))
	}
	for i, op := range r.Operations {
		if !slices.Contains(operations, string(op)) {
			errs = append(errs, field.NotSupported(fld.Child("operations").Index(i), op, operations))
		}
	}
	return append(errs, validateRule(r.Rule, fld)...)
}

func validateRule(r admissionregistrationv1.Rule, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	wild := func(name string, ss []string) {
		if len(ss) == 0 {
			errs = append(errs, field.Required(fld.Child(name), ""))
		}
		if len(ss) > 1 && slices.Contains(ss, "*") {
			errs = append(errs, field.Invalid(fld.Child(name), ss, "if '*' is present, must not specify other "+name))
		}
	}
	wild("apiGroups", r.APIGroups)
	wild("apiVersions", r.APIVersions)
	for i, v := range r.APIVersions {
		if v == "" {
			errs = append(errs, field.Required(fld.Child("apiVersions").Index(i), ""))
		}
	}
	if len(r.Resources) == 0 {
		errs = append(errs, field.Required(fld.Child("resources"), ""))
	}
	for i, rs := range r.Resources {
		rf := fld.Child("resources").Index(i)
		if rs == "" {
			errs = append(errs, field.Required(rf, ""))
			continue
		}
		res, sub, _ := strings.Cut(rs, "/")
		if strings.Count(rs, "/") > 1 {
			errs = append(errs, field.Invalid(rf, rs, "must be of the form resource or resource/subresource"))
			continue
		}
		if (res == "*" && sub == "") && len(r.Resources) > 1 {
			errs = append(errs, field.Invalid(rf, rs, "if '*' is present, must not specify other resources without subresources"))
		}
		if (res == "*" && sub == "*") && len(r.Resources) > 1 {
			errs = append(errs, field.Invalid(rf, rs, "if '*/*' is present, must not specify other resources"))
		}
	}
	if s := r.Scope; s != nil && !slices.Contains([]admissionregistrationv1.ScopeType{admissionregistrationv1.ClusterScope, admissionregistrationv1.NamespacedScope, admissionregistrationv1.AllScopes}, *s) {
		errs = append(errs, field.NotSupported(fld.Child("scope"), *s, []string{"Cluster", "Namespaced", "*"}))
	}
	return errs
}

var validationActions = []string{string(admissionregistrationv1.Deny), string(admissionregistrationv1.Warn), string(admissionregistrationv1.Audit)}

func validateValidatingBinding(b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&b.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	fld := field.NewPath("spec")
	errs = append(errs, validateBindingCommon(b.Spec.PolicyName, b.Spec.ParamRef, b.Spec.MatchResources, fld)...)
	af := fld.Child("validationActions")
	if len(b.Spec.ValidationActions) == 0 {
		errs = append(errs, field.Required(af, ""))
	}
	seen := sets.New[admissionregistrationv1.ValidationAction]()
	for i, a := range b.Spec.ValidationActions {
		switch {
		case !slices.Contains(validationActions, string(a)):
			errs = append(errs, field.NotSupported(af.Index(i), a, validationActions))
		case seen.Has(a):
			errs = append(errs, field.Duplicate(af.Index(i), a))
		}
		seen.Insert(a)
	}
	if seen.Has(admissionregistrationv1.Deny) && seen.Has(admissionregistrationv1.Warn) {
		errs = append(errs, field.Invalid(af, b.Spec.ValidationActions, "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)"))
	}
	return errs
}

func validateMutatingBinding(b *admissionregistrationv1.MutatingAdmissionPolicyBinding) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&b.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return append(errs, validateBindingCommon(b.Spec.PolicyName, b.Spec.ParamRef, b.Spec.MatchResources, field.NewPath("spec"))...)
}

func validateBindingCommon(policy string, pr *admissionregistrationv1.ParamRef, mr *admissionregistrationv1.MatchResources, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	if policy == "" {
		errs = append(errs, field.Required(fld.Child("policyName"), ""))
	} else {
		for _, msg := range apivalidation.NameIsDNSSubdomain(policy, false) {
			errs = append(errs, field.Invalid(fld.Child("policyName"), policy, msg))
		}
	}
	if pr != nil {
		pf := fld.Child("paramRef")
		switch {
		case pr.Name != "" && pr.Selector != nil:
			errs = append(errs, field.Forbidden(pf.Child("name"), "name and selector are mutually exclusive"))
		case pr.Name == "" && pr.Selector == nil:
			errs = append(errs, field.Required(pf, "one of name or selector must be specified"))
		}
		if pr.Name != "" {
			for _, msg := range apivalidation.NameIsDNSSubdomain(pr.Name, false) {
				errs = append(errs, field.Invalid(pf.Child("name"), pr.Name, msg))
			}
		}
		if pr.Namespace != "" {
			for _, msg := range apivalidation.ValidateNamespaceName(pr.Namespace, false) {
				errs = append(errs, field.Invalid(pf.Child("namespace"), pr.Namespace, msg))
			}
		}
		if pr.Selector != nil {
			errs = append(errs, metav1validation.ValidateLabelSelector(pr.Selector, metav1validation.LabelSelectorValidationOptions{}, pf.Child("selector"))...)
		}
		actions := []string{string(admissionregistrationv1.AllowAction), string(admissionregistrationv1.DenyAction)}
		switch a := pr.ParameterNotFoundAction; {
		case a == nil:
			errs = append(errs, field.Required(pf.Child("parameterNotFoundAction"), ""))
		case !slices.Contains(actions, string(*a)):
			errs = append(errs, field.NotSupported(pf.Child("parameterNotFoundAction"), *a, actions))
		}
	}
	if mr != nil {
		errs = append(errs, validateMatchResources(mr, fld.Child("matchResources"), false)...)
	}
	return errs
}

func validateMutatingPolicy(p, old *admissionregistrationv1.MutatingAdmissionPolicy) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&p.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	spec, fld := &p.Spec, field.NewPath("spec")
	oldExprs := sets.New[string]()
	if old != nil {
		for _, m := range old.Spec.Mutations {
			if m.ApplyConfiguration != nil {
				oldExprs.Insert(m.ApplyConfiguration.Expression)
			}
			if m.JSONPatch != nil {
				oldExprs.Insert(m.JSONPatch.Expression)
			}
		}
		for _, v := range old.Spec.Variables {
			oldExprs.Insert(v.Expression)
		}
		for _, m := range old.Spec.MatchConditions {
			oldExprs.Insert(m.Expression)
		}
	}
	errs = append(errs, validateParamKind(spec.ParamKind, fld.Child("paramKind"))...)
	if spec.MatchConstraints == nil {
		errs = append(errs, field.Required(fld.Child("matchConstraints"), ""))
	} else {
		mf := fld.Child("matchConstraints")
		errs = append(errs, validateMatchResources(spec.MatchConstraints, mf, true)...)
		for i, r := range spec.MatchConstraints.ResourceRules {
			for j, op := range r.Operations {
				if op != admissionregistrationv1.Create && op != admissionregistrationv1.Update {
					errs = append(errs, field.NotSupported(mf.Child("resourceRules").Index(i).Child("operations").Index(j), op, []string{"CREATE", "UPDATE"}))
				}
			}
		}
	}
	errs = append(errs, validateFailurePolicy(spec.FailurePolicy, fld.Child("failurePolicy"))...)
	rp := []string{string(admissionregistrationv1.NeverReinvocationPolicy), string(admissionregistrationv1.IfNeededReinvocationPolicy)}
	if !slices.Contains(rp, string(spec.ReinvocationPolicy)) {
		errs = append(errs, field.NotSupported(fld.Child("reinvocationPolicy"), spec.ReinvocationPolicy, rp))
	}
	if len(spec.Mutations) == 0 {
		errs = append(errs, field.Required(fld.Child("mutations"), "mutations must contain at least one item"))
	}
	c, ferr := newExpressionChecker(spec.ParamKind != nil, true, oldExprs)
	if ferr != nil {
		return append(errs, ferr)
	}
	errs = append(errs, c.matchConditions(spec.MatchConditions, fld.Child("matchConditions"))...)
	errs = append(errs, c.variables(spec.Variables, fld.Child("variables"))...)
	for i, m := range spec.Mutations {
		mf := fld.Child("mutations").Index(i)
		switch m.PatchType {
		case admissionregistrationv1.PatchTypeApplyConfiguration:
			if m.ApplyConfiguration == nil {
				errs = append(errs, field.Required(mf.Child("applyConfiguration"), "applyConfiguration required when patchType is ApplyConfiguration"))
			} else {
				errs = append(errs, c.check(mf.Child("applyConfiguration", "expression"), m.ApplyConfiguration.Expression, applyReturn)...)
			}
			if m.JSONPatch != nil {
				errs = append(errs, field.Forbidden(mf.Child("jsonPatch"), "jsonPatch must be unset when patchType is ApplyConfiguration"))
			}
		case admissionregistrationv1.PatchTypeJSONPatch:
			if m.JSONPatch == nil {
				errs = append(errs, field.Required(mf.Child("jsonPatch"), "jsonPatch required when patchType is JSONPatch"))
			} else {
				errs = append(errs, c.check(mf.Child("jsonPatch", "expression"), m.JSONPatch.Expression, jsonPatchReturn)...)
			}
			if m.ApplyConfiguration != nil {
				errs = append(errs, field.Forbidden(mf.Child("applyConfiguration"), "applyConfiguration must be unset when patchType is JSONPatch"))
			}
		default:
			errs = append(errs, field.NotSupported(mf.Child("patchType"), m.PatchType,
				[]string{string(admissionregistrationv1.PatchTypeApplyConfiguration), string(admissionregistrationv1.PatchTypeJSONPatch)}))
		}
	}
	return errs
}

var (
	sideEffectClasses       = []string{string(admissionregistrationv1.SideEffectClassNone), string(admissionregistrationv1.SideEffectClassNoneOnDryRun)}
	admissionReviewVersions = []string{"v1", "v1beta1"}
)

// validateWebhookConfiguration checks either kind of webhook
// configuration; old is nil on create.
func validateWebhookConfiguration(meta *metav1.ObjectMeta, ws, old []webhookView) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(meta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	oldExprs := sets.New[string]()
	for _, w := range old {
		for _, m := range w.matchConditions {
			oldExprs.Insert(m.Expression)
		}
	}
	names := sets.New[string]()
	for i, w := range ws {
		fld := field.NewPath("webhooks").Index(i)
		switch {
		case w.name == "":
			errs = append(errs, field.Required(fld.Child("name"), ""))
		case names.Has(w.name):
			errs = append(errs, field.Duplicate(fld.Child("name"), w.name))
		default:
			for _, msg := range utilvalidation.IsFullyQualifiedName(fld.Child("name"), w.name) {
				errs = append(errs, msg)
			}
		}
		names.Insert(w.name)
		for j, r := range w.rules {
			errs = append(errs, validateRuleWithOperations(r, fld.Child("rules").Index(j))...)
		}
		errs = append(errs, validateFailurePolicy(w.failurePolicy, fld.Child("failurePolicy"))...)
		if mp := w.matchPolicy; mp != nil && *mp != admissionregistrationv1.Exact && *mp != admissionregistrationv1.Equivalent {
			errs = append(errs, field.NotSupported(fld.Child("matchPolicy"), *mp, []string{"Exact", "Equivalent"}))
		}
		opts := metav1validation.LabelSelectorValidationOptions{}
		if w.namespaceSelector != nil {
			errs = append(errs, metav1validation.ValidateLabelSelector(w.namespaceSelector, opts, fld.Child("namespaceSelector"))...)
		}
		if w.objectSelector != nil {
			errs = append(errs, metav1validation.ValidateLabelSelector(w.objectSelector, opts, fld.Child("objectSelector"))...)
		}
		switch se := w.sideEffects; {
		case se == nil:
			errs = append(errs, field.Required(fld.Child("sideEffects"), fmt.Sprintf("must specify one of %s", strings.Join(sideEffectClasses, ", "))))
		case !slices.Contains(sideEffectClasses, string(*se)):
			errs = append(errs, field.NotSupported(fld.Child("sideEffects"), *se, sideEffectClasses))
		}
		if t := w.timeoutSeconds; t != nil && (*t < 1 || *t > 30) {
			errs = append(errs, field.Invalid(fld.Child("timeoutSeconds"), *t, "the timeout value must be between 1 and 30 seconds"))
		}
		errs = append(errs, validateReviewVersions(w.admissionReviewVersions, fld.Child("admissionReviewVersions"))...)
		errs = append(errs, validateClientConfig(w.clientConfig, fld.Child("clientConfig"))...)
		if rp := w.reinvocationPolicy; rp != nil && *rp != admissionregistrationv1.NeverReinvocationPolicy && *rp != admissionregistrationv1.IfNeededReinvocationPolicy {
			errs = append(errs, field.NotSupported(fld.Child("reinvocationPolicy"), *rp, []string{"Never", "IfNeeded"}))
		}
		if len(w.matchConditions) > 0 {
			c, ferr := newExpressionChecker(false, false, oldExprs)
			if ferr != nil {
				return append(errs, ferr)
			}
			errs = append(errs, c.matchConditions(w.matchConditions, fld.Child("matchConditions"))...)
		}
	}
	return errs
}

func validateReviewVersions(vs []string, fld *field.Path) field.ErrorList {
	if len(vs) == 0 {
		return field.ErrorList{field.Required(fld, fmt.Sprintf("must specify one of %s", strings.Join(admissionReviewVersions, ", ")))}
	}
	var errs field.ErrorList
	seen, known := sets.New[string](), false
	for i, v := range vs {
		if seen.Has(v) {
			errs = append(errs, field.Invalid(fld.Index(i), v, "duplicate version"))
		}
		seen.Insert(v)
		for _, msg := range utilvalidation.IsDNS1035Label(v) {
			errs = append(errs, field.Invalid(fld.Index(i), v, msg))
		}
		known = known || slices.Contains(admissionReviewVersions, v)
	}
	if !known {
		errs = append(errs, field.Invalid(fld, vs, fmt.Sprintf("must include at least one of %s", strings.Join(admissionReviewVersions, ", "))))
	}
	return errs
}

func validateClientConfig(cc admissionregistrationv1.WebhookClientConfig, fld *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case cc.URL != nil && cc.Service != nil:
		errs = append(errs, field.Required(fld, "exactly one of url or service is required"))
	case cc.URL == nil && cc.Service == nil:
		errs = append(errs, field.Required(fld, "exactly one of url or service is required"))
	case cc.URL != nil:
		uf := fld.Child("url")
		u, err := url.Parse(*cc.URL)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(uf, *cc.URL, err.Error()))
		case u.Scheme != "https":
			errs = append(errs, field.Invalid(uf, *cc.URL, "'https' is the only allowed URL scheme"))
		case u.Host == "":
			errs = append(errs, field.Invalid(uf, *cc.URL, "host must be specified"))
		case u.User != nil:
			errs = append(errs, field.Invalid(uf, *cc.URL, "user information is not permitted in the URL"))
		case u.Fragment != "" || u.RawQuery != "":
			errs = append(errs, field.Invalid(uf, *cc.URL, "fragments and query parameters are not permitted in the URL"))
		}
	default:
		s, sf := cc.Service, fld.Child("service")
		if s.Name == "" {
			errs = append(errs, field.Required(sf.Child("name"), "service name is required"))
		} else {
			for _, msg := range utilvalidation.IsDNS1123Label(s.Name) {
				errs = append(errs, field.Invalid(sf.Child("name"), s.Name, msg))
			}
		}
		if s.Namespace == "" {
			errs = append(errs, field.Required(sf.Child("namespace"), "service namespace is required"))
		} else {
			for _, msg := range utilvalidation.IsDNS1123Label(s.Namespace) {
				errs = append(errs, field.Invalid(sf.Child("namespace"), s.Namespace, msg))
			}
		}
		if s.Port != nil {
			for _, msg := range utilvalidation.IsValidPortNum(int(*s.Port)) {
				errs = append(errs, field.Invalid(sf.Child("port"), *s.Port, msg))
			}
		}
		if s.Path != nil && !strings.HasPrefix(*s.Path, "/") {
			errs = append(errs, field.Invalid(sf.Child("path"), *s.Path, "must start with a '/'"))
		}
	}
	return errs
}
