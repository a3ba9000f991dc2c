package celpolicy

import (
	"reflect"
	"strings"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
)

// fieldReads is a program option for the checked AST a that reads a
// variable and the fields selected from it (`object.metadata.name`,
// `variables.labels`, a quantifier's `k`) directly from the request's
// values when they are already CEL values, instead of through cel-go's
// attribute resolution, which converts the value with the program's
// adapter before and after each field (an identity for these values).
//
// A read is planned this way only when cel-go planned it as an attribute
// over one variable name written without a leading dot, with field
// selections (optional ones too) or constant string indexes; at each
// step the value must be one of the request's maps (sharedMap, the
// policy's variablesValue) holding the field, and the result a plain CEL
// value (plainValue). Anything else — a missing field, an error, another
// kind of value — is evaluated by cel-go's plan as before, so the result,
// errors included, is cel-go's. It must run before the quantifier
// decorator (the quantifier keeps the plans of its range and predicate
// as decorated).
func fieldReads(a *cel.Ast) cel.ProgramOption {
	return cel.CustomDecoratorV2(newFieldReadDecorator(a).decorate)
}

// fieldReadDecorator plans fieldRead nodes for one program.
type fieldReadDecorator struct {
	off     bool               // the expression names a variable with a leading dot
	planned map[int64]struct{} // the nodes planned as fieldRead
}

func newFieldReadDecorator(a *cel.Ast) *fieldReadDecorator {
	d := &fieldReadDecorator{planned: map[int64]struct{}{}}
	// A leading dot makes cel-go resolve the name past comprehension
	// variables (absoluteAttribute's disambiguation), which fieldRead
	// does not do: such programs keep cel-go's reads.
	celast.PostOrderVisit(a.NativeRep().Expr(), celast.NewExprVisitor(func(e celast.Expr) {
		if e.Kind() == celast.IdentKind && strings.HasPrefix(e.AsIdent(), ".") {
			d.off = true
		}
	}))
	for _, r := range a.NativeRep().ReferenceMap() {
		if strings.HasPrefix(r.Name, ".") {
			d.off = true
		}
	}
	return d
}

// The concrete types of cel-go's plans that fieldRead stands for: an
// attribute read (evalAttr) over an absolute attribute (a variable and
// qualifiers) with string qualifiers. They are unexported, so they are
// named by their reflected types.
var (
	evalAttrType          = "*interpreter.evalAttr"
	absoluteAttributeType = "*interpreter.absoluteAttribute"
	stringQualifierType   = "*interpreter.stringQualifier"
)

// decorate wraps each eligible attribute read in a fieldRead. The
// planner extends an attribute read in place as it plans the selects
// around it and decorates it again each time, so a fieldRead is planned
// anew (or unwrapped when no longer eligible) on every call.
func (d *fieldReadDecorator) decorate(i interpreter.InterpretableV2) (interpreter.InterpretableV2, error) {
	if d.off {
		return i, nil
	}
	if f, ok := i.(*fieldRead); ok {
		i = f.InterpretableAttribute
		delete(d.planned, f.id)
	}
	ia, ok := i.(interpreter.InterpretableAttribute)
	if !ok || reflect.TypeOf(i).String() != evalAttrType {
		return i, nil
	}
	na, ok := ia.Attr().(interpreter.NamespacedAttribute)
	if !ok || reflect.TypeOf(na).String() != absoluteAttributeType {
		return i, nil
	}
	names := na.CandidateVariableNames()
	if len(names) != 1 {
		return i, nil
	}
	quals := na.Qualifiers()
	keys := make([]ref.Val, len(quals))
	optFrom := len(quals)
	for n, q := range quals {
		cq, ok := q.(interpreter.ConstantQualifier)
		if !ok || reflect.TypeOf(q).String() != stringQualifierType {
			return i, nil
		}
		k, ok := cq.Value().(types.String)
		if !ok {
			return i, nil
		}
		keys[n] = k
		if q.IsOptional() && optFrom == len(quals) {
			optFrom = n
		}
	}
	f := &fieldRead{InterpretableAttribute: ia, id: ia.ID(), name: names[0], keys: keys, optFrom: optFrom}
	d.planned[f.id] = struct{}{}
	return f, nil
}

// fieldRead reads variable name and then keys from the request's
// values; it answers as the attribute read it wraps, which it
// evaluates whenever it cannot answer directly.
type fieldRead struct {
	interpreter.InterpretableAttribute
	id   int64 // the node ID when planned
	name string
	keys []ref.Val // types.String
	// optFrom is the index of the first optional selection (`?.`) in
	// keys, len(keys) when none: from there on a missing field makes the
	// read optional.none(), and a value read is wrapped in an optional.
	optFrom int
}

// Exec implements interpreter.InterpretableV2.
func (f *fieldRead) Exec(frame *interpreter.ExecutionFrame) ref.Val {
	if v, found := frame.ResolveName(f.name); found {
		if val, ok := f.read(v); ok {
			return val
		}
	}
	return f.InterpretableAttribute.Exec(frame)
}

// Eval implements interpreter.Interpretable.
func (f *fieldRead) Eval(a interpreter.Activation) ref.Val {
	return f.Exec(interpreter.AsFrame(a))
}

// read follows the keys from v, the variable's value, as cel-go's
// qualifiers would over the request's maps: ok is false where cel-go's
// answer could differ from a plain lookup (see fieldReads).
func (f *fieldRead) read(v any) (ref.Val, bool) {
	val, ok := plainValue(v)
	for n, k := range f.keys {
		if !ok {
			return nil, false
		}
		var m traits.Mapper
		switch t := val.(type) {
		case *sharedMap:
			m = t
		case *variablesValue:
			m = t
		default:
			return nil, false
		}
		var found bool
		if val, found = m.Find(k); !found {
			if n >= f.optFrom && val == nil {
				// cel-go's presence test of an optional selection.
				return types.OptionalNone, true
			}
			return nil, false
		}
		_, ok = plainValue(val)
	}
	if ok && f.optFrom < len(f.keys) {
		return types.OptionalOf(val), true
	}
	return val, ok
}

// plainValue returns v when it is a CEL value of a type the program's
// adapter returns as it is (types.Registry's NativeToValue: its
// `ref.Val` case, which no earlier case of the conversion matches) and
// that is neither an error, an unknown nor an optional, which cel-go's
// attribute resolution treats apart.
func plainValue(v any) (ref.Val, bool) {
	switch t := v.(type) {
	case types.String, types.Bool, types.Int, types.Uint, types.Double, types.Null,
		*sharedMap, *sharedList, *variablesValue:
		return t.(ref.Val), true
	}
	return nil, false
}
