package celpolicy

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/overloads"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/library"

	"github.com/meridian-cp/meridian/lib/kube/celenv"
)

// sizeBounds are the input size bounds B, in bytes, under which a
// policy's worst-case cost is estimated, smallest first. A request is
// gated by the smallest bound its inputs fit.
var sizeBounds = [...]uint64{4 << 10, 64 << 10}

// untracked is a validating policy's variables, validations and message
// expressions compiled a second time, in celenv's untracked twin of the
// environment with the same variables, as programs without cel-go's
// runtime cost observer; and their worst-case cost under each of
// sizeBounds, which gates their use (see fits).
type untracked struct {
	varNames []string
	varIndex map[string]int // varNames[i] → i
	vars     []cel.Program
	// varKeys, validationKeys and messageKeys are the programs' memoKeys
	// ("": evaluated by every policy).
	varKeys, validationKeys, messageKeys []string
	varsType                             *apiservercel.DeclType
	varsValType                          *types.Type // the type of variablesValue, as lazy.MapValue's
	validations                          []cel.Program
	messages                             []cel.Program // nil entries: validations without messageExpression
	hasMessages                          bool
	// cost[i] is the worst-case cost of evaluating the validations and
	// then the message expressions, each list with every variable once,
	// when every input is at most sizeBounds[i] bytes; MaxUint64 when an
	// expression's estimate is unbounded or over celenv.PerCallLimit.
	cost [len(sizeBounds)]uint64
}

// compileUntracked compiles p's variables, validations and message
// expressions in the untracked twin. It returns nil, and the policy is
// only ever evaluated with its tracked programs, when any of them does
// not compile there, when the tracked compilation of a validation or
// message expression failed (its error is the tracked path's result),
// or when the policy has no bounded worst case under any size bound.
func compileUntracked(p *admissionregistrationv1.ValidatingAdmissionPolicy, validations, messages expressions, opts plugincel.OptionalVariableDeclarations) *untracked {
	for _, r := range append(append([]plugincel.CompilationResult{}, validations.results...), messages.results...) {
		if r.Error != nil {
			return nil
		}
	}
	twin, err := celenv.Untracked()
	if err != nil {
		return nil
	}
	u := &untracked{varsType: apiservercel.NewObjectType("kubernetes.variables", map[string]*apiservercel.DeclField{}), varIndex: map[string]int{}}
	u.varsValType = types.NewTypeValue(u.varsType.TypeName(), traits.IndexerType|traits.FieldTesterType|traits.IterableType)
	valEnv, err := untrackedEnv(twin.StoredExpressionsEnv(), u.varsType, opts)
	if err != nil {
		return nil
	}
	// The message expressions' environment (no authorizer) and the size
	// probe's are built only for policies that need them.
	var msgEnv, probeEnv *cel.Env
	if len(p.Spec.Variables) > 0 {
		if probeEnv, err = valEnv.Extend(cel.Function(sizeProbe, cel.Overload(sizeProbe+"_dyn", []*cel.Type{cel.DynType}, cel.BoolType))); err != nil {
			return nil
		}
	}
	if !messages.empty {
		if msgEnv, err = untrackedEnv(twin.StoredExpressionsEnv(), u.varsType, plugincel.OptionalVariableDeclarations{HasParams: opts.HasParams}); err != nil {
			return nil
		}
	}
	compile := func(env *cel.Env, expr string) (*cel.Ast, cel.Program, bool) {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			return nil, nil, false
		}
		prg, err := env.Program(ast, cel.InterruptCheckFrequency(celconfig.CheckFrequency), fieldReads(ast), quantifiers(ast, env.CELTypeAdapter(), true))
		if err != nil {
			return nil, nil, false
		}
		return ast, prg, true
	}
	// valCost, msgCost and varCost[b] sum the estimates under sizeBounds[b]
	// (MaxUint64: unbounded or over the per-call limit); varSizes[b] holds
	// each variable's result size estimate (absent: unknown).
	var (
		valCost, msgCost, varCost [len(sizeBounds)]uint64
		varSizes                  [len(sizeBounds)]map[string]checker.SizeEstimate
	)
	for b := range sizeBounds {
		varSizes[b] = map[string]checker.SizeEstimate{}
	}
	add := func(sum *[len(sizeBounds)]uint64, env *cel.Env, ast *cel.Ast) {
		for b, bound := range sizeBounds {
			est, err := env.EstimateCost(ast, &costEstimator{bound: bound, vars: varSizes[b]})
			if err != nil || est.Max > celenv.PerCallLimit || sum[b] > math.MaxUint64-est.Max {
				sum[b] = math.MaxUint64
				continue
			}
			sum[b] += est.Max
		}
	}
	// Variables first, in order: each may read the ones before it, as
	// the tracked compiler declares them.
	for _, v := range p.Spec.Variables {
		ast, prg, ok := compile(valEnv, v.Expression)
		if !ok {
			return nil
		}
		add(&varCost, valEnv, ast)
		if probe, iss := probeEnv.Compile(sizeProbe + "(" + v.Expression + ")"); iss.Err() == nil {
			for b, bound := range sizeBounds {
				e := &costEstimator{bound: bound, vars: varSizes[b]}
				if _, err := probeEnv.EstimateCost(probe, e); err == nil && e.probed != nil {
					varSizes[b][v.Name] = *e.probed
				}
			}
		}
		u.varsType.Fields[v.Name] = apiservercel.NewDeclField(v.Name, declType(ast.OutputType()), true, nil, nil)
		u.varIndex[v.Name] = len(u.varNames)
		u.varNames = append(u.varNames, v.Name)
		u.vars = append(u.vars, prg)
		u.varKeys = append(u.varKeys, memoKey(v.Expression, ast))
	}
	u.validations = make([]cel.Program, len(p.Spec.Validations))
	u.messages = make([]cel.Program, len(p.Spec.Validations))
	u.validationKeys = make([]string, len(p.Spec.Validations))
	u.messageKeys = make([]string, len(p.Spec.Validations))
	for i, v := range p.Spec.Validations {
		ast, prg, ok := compile(valEnv, v.Expression)
		if !ok {
			return nil
		}
		add(&valCost, valEnv, ast)
		u.validations[i], u.validationKeys[i] = prg, memoKey(v.Expression, ast)
		if v.MessageExpression == "" {
			continue
		}
		if ast, u.messages[i], ok = compile(msgEnv, v.MessageExpression); !ok {
			return nil
		}
		add(&msgCost, msgEnv, ast)
		u.messageKeys[i] = memoKey(v.MessageExpression, ast)
		u.hasMessages = true
	}
	bounded := false
	for b := range sizeBounds {
		// The message expressions evaluate the variables again (a list's
		// variables are evaluated at most once per list).
		lists := uint64(1)
		if u.hasMessages {
			lists = 2
		}
		u.cost[b] = math.MaxUint64
		if valCost[b] == math.MaxUint64 || msgCost[b] == math.MaxUint64 || varCost[b] == math.MaxUint64 ||
			varCost[b] > (math.MaxUint64/4) || valCost[b] > math.MaxUint64/4 || msgCost[b] > math.MaxUint64/4 {
			continue
		}
		u.cost[b] = valCost[b] + msgCost[b] + lists*varCost[b]
		bounded = true
	}
	if !bounded {
		return nil
	}
	return u
}

// untrackedEnv is base with the admission variables declared as
// kube-apiserver's CompositedCompiler and createEnvForOpts declare them:
// `variables` first (varsType, whose fields are added as variables
// compile), then object, oldObject, namespaceObject, request, and params
// and the authorizer as opts say.
func untrackedEnv(base *cel.Env, varsType *apiservercel.DeclType, opts plugincel.OptionalVariableDeclarations) (*cel.Env, error) {
	extend := func(env *cel.Env, decls []*apiservercel.DeclType, envOpts ...cel.EnvOption) (*cel.Env, error) {
		provider := apiservercel.NewDeclTypeProvider(decls...)
		// The stored-expressions environment is built at the newest
		// version, where keywords are recognized as field names.
		provider.SetRecognizeKeywordAsFieldName(true)
		providerOpts, err := provider.EnvOptions(env.CELTypeProvider())
		if err != nil {
			return nil, err
		}
		return env.Extend(append(envOpts, providerOpts...)...)
	}
	env, err := extend(base, []*apiservercel.DeclType{varsType}, cel.Variable(plugincel.VariableVarName, varsType.CelType()))
	if err != nil {
		return nil, fmt.Errorf("variables: %w", err)
	}
	namespaceType, requestType := plugincel.BuildNamespaceType(), plugincel.BuildRequestType()
	envOpts := []cel.EnvOption{
		cel.Variable(plugincel.ObjectVarName, cel.DynType),
		cel.Variable(plugincel.OldObjectVarName, cel.DynType),
		cel.Variable(plugincel.NamespaceVarName, namespaceType.CelType()),
		cel.Variable(plugincel.RequestVarName, requestType.CelType()),
	}
	if opts.HasParams {
		envOpts = append(envOpts, cel.Variable(plugincel.ParamsVarName, cel.DynType))
	}
	if opts.HasAuthorizer {
		envOpts = append(envOpts,
			cel.Variable(plugincel.AuthorizerVarName, library.AuthorizerType),
			cel.Variable(plugincel.RequestResourceAuthorizerVarName, library.ResourceCheckType))
	}
	return extend(env, []*apiservercel.DeclType{namespaceType, requestType}, envOpts...)
}

// sizeProbe is a function declared only in the environment that
// estimates a variable's result size: the estimator sees its argument's
// size estimate when it is asked the call's cost.
const sizeProbe = "meridian_size_probe"

// costEstimator is Kubernetes' cost estimator (library.CostEstimator)
// with sizes known from the gate's bound: every value read from an input
// (a path rooted at object, oldObject, params, namespaceObject or request:
// a field, a list item, a map key or value) is at most bound in size, as
// it is at most the size of the input's serialization; a variable read as
// a whole (variables.<name>) is at most its expression's estimated result
// size. Every other size is unknown to it, so the checker computes it or
// treats it as unbounded.
type costEstimator struct {
	bound  uint64
	vars   map[string]checker.SizeEstimate
	probed *checker.SizeEstimate // the size probe's argument size, when asked
}

// EstimateSize implements checker.CostEstimator.
func (e *costEstimator) EstimateSize(n checker.AstNode) *checker.SizeEstimate {
	path := n.Path()
	if e.fromInput(path) {
		return &checker.SizeEstimate{Min: 0, Max: e.bound}
	}
	if len(path) == 2 && path[0] == plugincel.VariableVarName {
		if s, ok := e.vars[path[1]]; ok {
			return &s
		}
	}
	return nil
}

// EstimateCallCost implements checker.CostEstimator.
func (e *costEstimator) EstimateCallCost(function, overloadID string, target *checker.AstNode, args []checker.AstNode) *checker.CallEstimate {
	if function == sizeProbe {
		if len(args) == 1 {
			e.probed = args[0].ComputedSize()
		}
		return &checker.CallEstimate{}
	}
	if est := e.optionalCallCost(overloadID, target, args); est != nil {
		return est
	}
	return (&library.CostEstimator{SizeEstimator: e}).EstimateCallCost(function, overloadID, target, args)
}

// optionalCallCost is the estimate of an optional-types call, or of a
// scalar's conversion to string, with a known result size, or nil. Its
// cost is the one cel-go's checker gives these calls (1 plus the
// arguments'); the result size is what cel-go leaves unknown: an
// optional value's size is the size of the value it holds, a field or
// entry selected from an input is an input's value, or/orValue/value
// give one of their operands, and a scalar's string is short.
func (e *costEstimator) optionalCallCost(overloadID string, target *checker.AstNode, args []checker.AstNode) *checker.CallEstimate {
	var size *checker.SizeEstimate
	switch overloadID {
	case "select_optional_field", "map_optindex_optional_value", "list_optindex_optional_int": // x.?f, x[?k], x[?i]
		if len(args) == 2 && e.fromInput(args[0].Path()) {
			size = &checker.SizeEstimate{Min: 0, Max: e.bound}
		}
	case "optional_orValue_value", "optional_or_optional": // o.orValue(v), o.or(p)
		if target != nil && len(args) == 1 {
			if t, a := (*target).ComputedSize(), args[0].ComputedSize(); t != nil && a != nil {
				u := t.Union(*a)
				size = &u
			}
		}
	case "optional_value": // o.value()
		if target != nil {
			size = (*target).ComputedSize()
		}
	case overloads.IntToString, overloads.UintToString, overloads.BoolToString, overloads.DoubleToString:
		// string(x) of a scalar: at most 20 digits and a sign, "false",
		// or a shortest-form float64 (at most 24 characters).
		size = &checker.SizeEstimate{Min: 1, Max: 32}
	}
	if size == nil {
		return nil
	}
	return &checker.CallEstimate{CostEstimate: checker.FixedCostEstimate(1), ResultSize: size}
}

// fromInput reports whether path is rooted at an input variable, whose
// every string, list and map is at most the bound in size.
func (e *costEstimator) fromInput(path []string) bool {
	if len(path) == 0 {
		return false
	}
	switch path[0] {
	case plugincel.ObjectVarName, plugincel.OldObjectVarName, plugincel.ParamsVarName, plugincel.NamespaceVarName, plugincel.RequestVarName:
		return true
	}
	return false
}

// declType is a variable's output type as a field of the variables
// object, as kube-apiserver's composition converts it.
func declType(t *cel.Type) *apiservercel.DeclType {
	if t == nil {
		return apiservercel.DynType
	}
	switch t {
	case cel.AnyType:
		return apiservercel.AnyType
	case cel.BoolType:
		return apiservercel.BoolType
	case cel.BytesType:
		return apiservercel.BytesType
	case cel.DoubleType:
		return apiservercel.DoubleType
	case cel.DurationType:
		return apiservercel.DurationType
	case cel.IntType:
		return apiservercel.IntType
	case cel.NullType:
		return apiservercel.NullType
	case cel.StringType:
		return apiservercel.StringType
	case cel.TimestampType:
		return apiservercel.TimestampType
	case cel.UintType:
		return apiservercel.UintType
	}
	if t.HasTrait(traits.ContainerType) && t.HasTrait(traits.IndexerType) {
		switch ps := t.Parameters(); len(ps) {
		case 1:
			return apiservercel.NewListType(declType(ps[0]), -1)
		case 2:
			return apiservercel.NewMapType(declType(ps[0]), declType(ps[1]), -1)
		}
	}
	return apiservercel.DynType
}

// fits reports whether the untracked programs may be evaluated for a
// request whose inputs are each at most size bytes, under budget: the
// policy's worst-case cost under the smallest bound that size fits is
// within budget. This is where the gate's invariant is enforced: every
// expression's and variable's estimated cost is within
// celenv.PerCallLimit (compileUntracked), and all of them together,
// variables counted once per list, within budget; the estimates bound
// the runtime cost the tracked programs would charge (as Kubernetes'
// write-time cost checks rely on), so the tracked path could neither
// exceed the per-call limit nor run out of budget, in the validations or
// in the message expressions (which get what the validations left:
// at least the message expressions' and variables' worst case). Its
// decisions are then those of the untracked evaluation.
func (u *untracked) fits(size uint64, budget int64) bool {
	if budget < 0 {
		return false
	}
	for b, bound := range sizeBounds {
		if size <= bound {
			return u.cost[b] <= uint64(budget)
		}
	}
	return false
}

// eval evaluates the validations and then the message expressions (nil
// results when there are none) over the request's input, as
// expressions.forInput would with the tracked programs, the variables
// evaluated lazily and at most once per list. ok is false when any
// expression or variable failed to evaluate: the caller then evaluates
// the tracked programs, so every error is reported as the tracked path
// reports it. quick (see quick) evaluates without watching ctx.
func (u *untracked) eval(ctx context.Context, in *celInput, params any, quick bool, validations, messages expressions) (valResults, msgResults []plugincel.EvaluationResult, ok bool) {
	r := &in.scratch.run
	*r = untrackedRun{u: u, ctx: ctx, quick: quick}
	r.act = activation{in: in, params: params, authorizer: true}
	if quick {
		// One frame over the run's activation for all of the policy's
		// programs (both lists: the activation is replaced in place),
		// instead of one taken from cel-go's pool and returned per
		// program. Eval uses a frame it is given as it is: the
		// environment has no default variables to layer under it.
		frame, err := interpreter.NewExecutionFrame(&r.act)
		if err != nil {
			return nil, nil, false
		}
		r.frame = frame
		defer func() {
			frame.Close()
			r.frame = nil
		}()
	}
	if len(u.vars) > 0 {
		r.vars = variablesValue{run: r, values: in.scratch.values(len(u.vars))}
		r.act.variables = &r.vars
	}
	valResults, msgResults = in.scratch.results(len(u.validations), len(u.messages))
	for i, prg := range u.validations {
		val, err := r.evalProgram(prg, u.validationKeys[i])
		if err != nil || r.failed {
			return nil, nil, false
		}
		valResults[i] = plugincel.EvaluationResult{EvalResult: val, ExpressionAccessor: validations.results[i].ExpressionAccessor}
	}
	if !u.hasMessages {
		return valResults, nil, true
	}
	// The message expressions are a list of their own: no authorizer, and
	// the variables evaluated again.
	r.act = activation{in: in, params: params}
	if len(u.vars) > 0 {
		r.vars = variablesValue{run: r, values: in.scratch.values(len(u.vars))}
		r.act.variables = &r.vars
	}
	for i, prg := range u.messages {
		if prg == nil { // a placeholder
			continue
		}
		val, err := r.evalProgram(prg, u.messageKeys[i])
		if err != nil || r.failed {
			return nil, nil, false
		}
		msgResults[i] = plugincel.EvaluationResult{EvalResult: val, ExpressionAccessor: messages.results[i].ExpressionAccessor}
	}
	return valResults, msgResults, true
}

// untrackedRun is one untracked evaluation of a policy's lists: the
// current list's activation and variables, allocated together.
type untrackedRun struct {
	u      *untracked
	ctx    context.Context
	quick  bool
	failed bool // a variable failed to evaluate
	act    activation
	vars   variablesValue
	frame  *interpreter.ExecutionFrame // over act, when quick
}

// evalProgram evaluates prg, whose memoKey is key, over the current
// list's activation: without watching ctx when the run is quick, else
// interrupted when ctx ends; a program with a key is evaluated once per
// request, its value shared by every policy of the request that holds
// the same expression (celInput.memoized). Skipping an evaluation only
// lowers the cost the gate (fits) bounded.
func (r *untrackedRun) evalProgram(prg cel.Program, key string) (ref.Val, error) {
	if v, ok := r.act.in.memo[key]; ok {
		return v, nil
	}
	var val ref.Val
	var err error
	if r.quick {
		val, _, err = prg.Eval(r.frame)
	} else {
		val, _, err = prg.ContextEval(r.ctx, &r.act)
	}
	if err == nil {
		r.act.in.remember(key, val)
	}
	return val, err
}

// quick reports whether a request whose inputs are each at most size
// bytes may be evaluated without watching its context: the policy's
// worst-case cost under the smallest bound size fits is at most
// quickCost, so the evaluation is short whatever the input, and the
// request's context is checked between policies (validatingInvocation.check).
// Otherwise cel-go's ContextEval interrupts the evaluation when the
// context ends, at the price of a cancelable context per expression.
func (u *untracked) quick(size uint64) bool {
	for b, bound := range sizeBounds {
		if size <= bound {
			return u.cost[b] <= quickCost
		}
	}
	return false
}

// quickCost bounds the worst-case cost of a policy evaluated without
// watching the request's context (see quick): at the interpreter's tens
// of nanoseconds per unit of cost, a few milliseconds.
const quickCost = 100_000

// inputSize bounds the size of every input of a request's evaluation
// with param: the largest of the request's serialization (which holds
// object, oldObject and every field of request), the namespace's, and
// param's JSON (memoized by ps when collect returned param).
func inputSize(in *celInput, ps *paramSource, param runtime.Object) uint64 {
	size := in.size
	if param == nil {
		return size
	}
	if e := ps.converted(param); e != nil {
		return max(size, e.size)
	}
	js, err := json.Marshal(param)
	if err != nil {
		return math.MaxUint64
	}
	return max(size, uint64(len(js)))
}
