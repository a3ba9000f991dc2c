package celpolicy

import (
	"context"
	"fmt"
	"math"

	"k8s.io/apimachinery/pkg/runtime"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"
	celcommon "k8s.io/apiserver/pkg/cel/common"
	"k8s.io/apiserver/pkg/cel/environment"
)

// expressions is a compiled list of a policy's expressions evaluated
// together under one cost budget (its validations, its message
// expressions, or its audit annotations), over the compiler that holds
// the policy's variables. A zero CompilationResult is a placeholder (a
// validation without messageExpression) and evaluates to nothing.
type expressions struct {
	compiler *plugincel.CompositedCompiler
	results  []plugincel.CompilationResult
	// empty: every result is a placeholder, so evaluating gives zero
	// results and costs nothing.
	empty bool
}

// compileExpressions compiles accessors (nil entries are placeholders)
// as kube-apiserver's CompileCondition does.
func compileExpressions(c *plugincel.CompositedCompiler, accessors []plugincel.ExpressionAccessor, opts plugincel.OptionalVariableDeclarations) expressions {
	e := expressions{compiler: c, results: make([]plugincel.CompilationResult, len(accessors)), empty: true}
	for i, a := range accessors {
		if a == nil {
			continue
		}
		e.results[i] = c.CompileCELExpression(a, opts, environment.StoredExpressions)
		e.empty = false
	}
	return e
}

// forInput evaluates the expressions in order over one activation, as
// kube-apiserver's CompositedConditionEvaluator.ForInput does: the
// variables are evaluated lazily, at most once, their cost charged to the
// expression that first reads them; an expression's own error is its
// result's Error; running out of budget stops the list with an error.
// It returns the budget left.
func (e expressions) forInput(ctx context.Context, act *activation, budget int64) ([]plugincel.EvaluationResult, int64, error) {
	results := make([]plugincel.EvaluationResult, len(e.results))
	if len(e.results) == 0 {
		return results, budget, nil
	}
	cctx := e.compiler.CreateContext(ctx)
	act.variables = cctx.Variables(act)
	var err error
	for i, r := range e.results {
		results[i], budget, err = evaluate(cctx, act, r, budget)
		if err != nil {
			return nil, -1, err
		}
	}
	return results, budget, nil
}

// evaluate runs one compiled expression with the remaining budget, as
// kube-apiserver's evaluationActivation.Evaluate does (the same errors and
// messages), and returns the budget left.
func evaluate(cctx plugincel.CompositionContext, act *activation, r plugincel.CompilationResult, budget int64) (plugincel.EvaluationResult, int64, error) {
	var res plugincel.EvaluationResult
	if r.ExpressionAccessor == nil { // a placeholder
		return res, budget, nil
	}
	res.ExpressionAccessor = r.ExpressionAccessor
	if r.Error != nil {
		res.Error = &apiservercel.Error{Type: apiservercel.ErrorTypeInvalid, Detail: fmt.Sprintf("compilation error: %v", r.Error), Cause: r.Error}
		return res, budget, nil
	}
	if r.Program == nil {
		res.Error = &apiservercel.Error{Type: apiservercel.ErrorTypeInternal, Detail: "unexpected internal error compiling expression"}
		return res, budget, nil
	}
	val, details, err := r.Program.ContextEval(cctx, act)
	// Variables read for the first time cost here.
	if cost := cctx.GetAndResetCost(); cost > budget {
		return res, -1, outOfBudget()
	} else {
		budget -= cost
	}
	if details == nil {
		return res, -1, &apiservercel.Error{Type: apiservercel.ErrorTypeInternal,
			Detail: fmt.Sprintf("runtime cost could not be calculated for expression: %v, no further expression will be run", r.ExpressionAccessor.GetExpression())}
	}
	cost := details.ActualCost()
	if cost == nil {
		return res, -1, &apiservercel.Error{Type: apiservercel.ErrorTypeInvalid,
			Detail: fmt.Sprintf("runtime cost could not be calculated for expression: %v, no further expression will be run", r.ExpressionAccessor.GetExpression()),
			Cause:  apiservercel.ErrOutOfBudget}
	}
	if *cost > math.MaxInt64 || int64(*cost) > budget {
		return res, -1, outOfBudget()
	}
	budget -= int64(*cost)
	if err != nil {
		res.Error = &apiservercel.Error{Type: apiservercel.ErrorTypeInvalid,
			Detail: fmt.Sprintf("expression '%v' resulted in error: %v", r.ExpressionAccessor.GetExpression(), err)}
	} else {
		res.EvalResult = val
	}
	return res, budget, nil
}

func outOfBudget() error {
	return &apiservercel.Error{Type: apiservercel.ErrorTypeInvalid,
		Detail: "validation failed due to running out of cost budget, no further validation rules will be run",
		Cause:  apiservercel.ErrOutOfBudget}
}

// paramValue is a param object as a CEL value (nil: no param).
func paramValue(param runtime.Object) any {
	if param == nil {
		return nil
	}
	return celcommon.SchemalessTypedToVal(param)
}
