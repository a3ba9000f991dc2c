package celpolicy

import (
	"sync"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
)

// quantifiers is a program option for the checked AST a that evaluates
// each of its comprehensions in the form the all() and exists() macros
// expand to with a quantifier instead of cel-go's general fold.
//
// cel-go folds `r.all(x, p)` as: accumulator true; per element, the
// loop condition `@not_strictly_false(@result)` (stop once the
// accumulator is false), then the step `@result && p`, then an
// interrupt check; the result is the accumulator (exists(): false,
// `@not_strictly_false(!@result)`, `@result || p`). A quantifier does
// the same per element without evaluating the condition and the step as
// expressions: it stops where the condition would, combines the
// accumulator and p as the step's `&&` (`||`) does, absorbing errors
// and unknowns the same way and labelling an error with the step's node,
// and binds x as the fold does (converted with the program's adapter on
// first read). interruptable must be true when the program is built
// with cel.InterruptCheckFrequency, so the quantifier checks for an
// interrupt after each step as cel-go's fold then does.
//
// It does not track cost: it is for programs built without cel-go's
// cost tracking, state tracking or exhaustive evaluation (the untracked
// twin's programs). Decorators run in option order and this one runs
// before cel-go's own (interrupts, constant folding, regex compilation),
// so a comprehension is replaced only when its range and p are nodes
// none of those replace (see plainRoot); any other keeps cel-go's fold.
func quantifiers(a *cel.Ast, adapter types.Adapter, interruptable bool) cel.ProgramOption {
	return cel.CustomDecoratorV2(newQuantifierDecorator(a, adapter, interruptable).decorate)
}

// newQuantifierDecorator finds a's comprehensions of the quantifier
// form (see quantifiers) for one program's planning.
func newQuantifierDecorator(a *cel.Ast, adapter types.Adapter, interruptable bool) *quantifierDecorator {
	d := &quantifierDecorator{folds: map[int64]*quantifierForm{}, parts: map[int64]*interpreter.InterpretableV2{}}
	bindings := &sync.Pool{New: func() any { return new(iterBinding) }}
	celast.PostOrderVisit(a.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if f := quantifierFormOf(e); f != nil {
			f.adapter, f.interruptable, f.bindings = adapter, interruptable, bindings
			d.folds[e.ID()] = f
			d.parts[f.rangeID] = &f.iterRange
			d.parts[f.predID] = &f.pred
		}
	}))
	return d
}

// quantifierDecorator replaces the comprehensions in folds as cel-go
// plans the program, bottom up: the range and predicate of each are
// planned (and kept in parts) before the comprehension itself. A
// comprehension is removed from folds when replaced.
type quantifierDecorator struct {
	folds map[int64]*quantifierForm
	parts map[int64]*interpreter.InterpretableV2 // node ID → where its plan is kept
}

func (d *quantifierDecorator) decorate(i interpreter.InterpretableV2) (interpreter.InterpretableV2, error) {
	if f, ok := d.folds[i.ID()]; ok && f.iterRange != nil && f.pred != nil {
		delete(d.folds, i.ID()) // replaced once: no later node takes its place
		i = &quantifier{quantifierForm: *f}
	}
	if p, ok := d.parts[i.ID()]; ok {
		*p = i
	}
	return i, nil
}

// quantifierForm is a comprehension of the all() or exists() form:
// iterRange and pred are its range's and predicate's plans.
type quantifierForm struct {
	id, stepID      int64
	rangeID, predID int64
	iterVar         string
	exists          bool
	iterRange, pred interpreter.InterpretableV2
	adapter         types.Adapter
	interruptable   bool
	bindings        *sync.Pool // of *iterBinding, per program
}

// quantifierFormOf returns e's form when e is a one-variable
// comprehension expanded as all() (exists()) expands: accumulator
// initialized to true (false), loop condition
// `@not_strictly_false(@result)` (`@not_strictly_false(!@result)`), step
// `@result && p` (`@result || p`) with p not reading the accumulator, and
// result `@result`; and its range and p are plain roots. Otherwise nil.
func quantifierFormOf(e celast.Expr) *quantifierForm {
	if e.Kind() != celast.ComprehensionKind {
		return nil
	}
	c := e.AsComprehension()
	accu := c.AccuVar()
	if c.HasIterVar2() || c.IterVar() == accu || !isIdent(c.Result(), accu) {
		return nil
	}
	init := c.AccuInit()
	if init.Kind() != celast.LiteralKind {
		return nil
	}
	var exists bool
	switch init.AsLiteral() {
	case types.True:
	case types.False:
		exists = true
	default:
		return nil
	}
	cond := c.LoopCondition()
	if !isCall(cond, operators.NotStrictlyFalse, 1) {
		return nil
	}
	tested, op := cond.AsCall().Args()[0], operators.LogicalAnd
	if exists {
		if !isCall(tested, operators.LogicalNot, 1) {
			return nil
		}
		tested, op = tested.AsCall().Args()[0], operators.LogicalOr
	}
	step := c.LoopStep()
	if !isIdent(tested, accu) || !isCall(step, op, 2) || !isIdent(step.AsCall().Args()[0], accu) {
		return nil
	}
	pred := step.AsCall().Args()[1]
	if reads(pred, accu) || !plainRoot(pred) || !plainRoot(c.IterRange()) {
		return nil
	}
	return &quantifierForm{id: e.ID(), stepID: step.ID(), rangeID: c.IterRange().ID(), predID: pred.ID(), iterVar: c.IterVar(), exists: exists}
}

func isIdent(e celast.Expr, name string) bool {
	return e.Kind() == celast.IdentKind && e.AsIdent() == name
}

func isCall(e celast.Expr, fn string, args int) bool {
	if e.Kind() != celast.CallKind {
		return false
	}
	c := e.AsCall()
	return c.FunctionName() == fn && !c.IsMemberFunction() && len(c.Args()) == args
}

// plainCalls are the functions whose calls cel-go's own decorators
// (constant folding of lists, maps and type conversions, set membership
// for `in`, regex compilation) leave as planned.
var plainCalls = map[string]bool{
	operators.Less: true, operators.LessEquals: true, operators.Greater: true, operators.GreaterEquals: true,
	operators.Equals: true, operators.NotEquals: true, operators.LogicalAnd: true, operators.LogicalOr: true,
	operators.LogicalNot: true, operators.Conditional: true, operators.Index: true,
	"size": true, "startsWith": true, "endsWith": true, "contains": true,
}

// plainRoot reports whether e's plan is one no cel-go decorator replaces
// (so the plan the quantifier decorator sees is the final one): an
// identifier, a literal, a field selection, a comprehension or a call of
// plainCalls.
func plainRoot(e celast.Expr) bool {
	switch e.Kind() {
	case celast.IdentKind, celast.LiteralKind, celast.SelectKind, celast.ComprehensionKind:
		return true
	case celast.CallKind:
		return plainCalls[e.AsCall().FunctionName()]
	}
	return false
}

// reads reports whether e reads the variable name where it is not bound
// again by a comprehension inside e.
func reads(e celast.Expr, name string) bool {
	switch e.Kind() {
	case celast.IdentKind:
		return e.AsIdent() == name
	case celast.SelectKind:
		return reads(e.AsSelect().Operand(), name)
	case celast.CallKind:
		c := e.AsCall()
		if c.IsMemberFunction() && reads(c.Target(), name) {
			return true
		}
		for _, a := range c.Args() {
			if reads(a, name) {
				return true
			}
		}
	case celast.ListKind:
		for _, a := range e.AsList().Elements() {
			if reads(a, name) {
				return true
			}
		}
	case celast.MapKind:
		for _, en := range e.AsMap().Entries() {
			if me := en.AsMapEntry(); reads(me.Key(), name) || reads(me.Value(), name) {
				return true
			}
		}
	case celast.StructKind:
		for _, f := range e.AsStruct().Fields() {
			if reads(f.AsStructField().Value(), name) {
				return true
			}
		}
	case celast.ComprehensionKind:
		c := e.AsComprehension()
		if reads(c.IterRange(), name) || reads(c.AccuInit(), name) {
			return true
		}
		if name == c.AccuVar() {
			return false
		}
		if reads(c.Result(), name) {
			return true
		}
		if name == c.IterVar() || name == c.IterVar2() {
			return false
		}
		return reads(c.LoopCondition(), name) || reads(c.LoopStep(), name)
	}
	return false
}

// quantifier evaluates a comprehension of quantifierForm.
type quantifier struct {
	quantifierForm
}

// ID implements interpreter.Interpretable: the comprehension's node.
func (q *quantifier) ID() int64 { return q.id }

// Eval implements interpreter.Interpretable.
func (q *quantifier) Eval(a interpreter.Activation) ref.Val { return q.Exec(interpreter.AsFrame(a)) }

// Exec implements interpreter.InterpretableV2, as cel-go's fold
// evaluates the comprehension (see quantifiers).
func (q *quantifier) Exec(frame *interpreter.ExecutionFrame) ref.Val {
	r := q.iterRange.Exec(frame)
	if types.IsUnknownOrError(r) {
		return r
	}
	if !r.Type().HasTrait(traits.IterableType) {
		return types.ValOrErr(r, "got '%T', expected iterable type", r)
	}
	// stop is the accumulator's value at which the loop condition ends
	// the loop, and the value the step's operator short-circuits on; the
	// accumulator starts at the other.
	stop := types.False
	if q.exists {
		stop = types.True
	}
	v := q.bindings.Get().(*iterBinding)
	v.name, v.adapter, v.parent = q.iterVar, q.adapter, frame
	child := frame.Push(v)
	defer func() {
		child.Pop()
		*v = iterBinding{}
		q.bindings.Put(v)
	}()
	acc, interrupted := ref.Val(!stop), false
	if m, ok := r.(*sharedMap); ok {
		// The keys its iterator would yield, without the iterator.
		for _, k := range m.keyList() {
			if acc, interrupted = q.next(child, v, k, acc, stop); interrupted || acc == stop {
				break
			}
		}
	} else {
		for it := r.(traits.Iterable).Iterator(); it.HasNext() == types.True; {
			if acc, interrupted = q.next(child, v, it.Next(), acc, stop); interrupted || acc == stop {
				break
			}
		}
	}
	if interrupted {
		return types.WrapErr(interpreter.InterruptError{})
	}
	return acc
}

// next evaluates one element: p with the iteration variable bound to
// elem, combined with acc by the step. Once acc is stop, the loop
// condition ends the loop before any further element.
func (q *quantifier) next(child *interpreter.ExecutionFrame, v *iterBinding, elem any, acc ref.Val, stop types.Bool) (_ ref.Val, interrupted bool) {
	v.val, v.converted = elem, false
	acc = q.step(acc, q.pred.Exec(child), stop)
	return acc, q.interruptable && child.CheckInterrupt()
}

// step is the step's `acc && p` (`acc || p`) as cel-go evaluates it
// over the two values: stop as soon as either is stop, else the
// unknowns merged, else the first error labelled with the step's node,
// else the other truth value.
func (q *quantifier) step(acc, p ref.Val, stop types.Bool) ref.Val {
	var err ref.Val
	var unk *types.Unknown
	for _, val := range [2]ref.Val{acc, p} {
		b, ok := val.(types.Bool)
		if ok && b == stop {
			return stop
		}
		if ok {
			continue
		}
		var isUnk bool
		unk, isUnk = types.MaybeMergeUnknowns(val, unk)
		if !isUnk && err == nil {
			if types.IsError(val) {
				err = val
			} else {
				err = types.MaybeNoSuchOverloadErr(val)
			}
			err = types.LabelErrNode(q.stepID, err)
		}
	}
	if unk != nil {
		return unk
	}
	if err != nil {
		return err
	}
	return !stop
}

// iterBinding binds a quantifier's iteration variable to the current
// element, converted on first read as cel-go's fold converts it.
type iterBinding struct {
	name      string
	val       any
	converted bool
	adapter   types.Adapter
	parent    *interpreter.ExecutionFrame
}

// ResolveName implements interpreter.Activation: the iteration variable.
func (b *iterBinding) ResolveName(name string) (any, bool) {
	if name != b.name {
		return nil, false
	}
	if !b.converted {
		// A plain CEL value (a shared map's key, say) is its own
		// conversion.
		if v, ok := plainValue(b.val); ok {
			b.val = v
		} else {
			b.val = b.adapter.NativeToValue(b.val)
		}
		b.converted = true
	}
	return b.val, true
}

// Parent implements interpreter.Activation: the frame the quantifier
// runs in, as cel-go's folder answers.
func (b *iterBinding) Parent() interpreter.Activation { return b.parent }

// Unwrap omits the local variable, as cel-go's folder does.
func (b *iterBinding) Unwrap() interpreter.Activation { return b.parent }
