package celpolicy

import (
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
)

// memoKey is the key under which the value of an untracked program
// compiled from expr is kept for the other policies of the same request
// (celInput.memo), or "" when its value may differ between policies: it
// reads something other than the request's inputs.
//
// An expression qualifies when every variable it reads is object,
// oldObject, request or namespaceObject (comprehension variables aside).
// Those are the same values for every validating policy of one request
// (the validations' and the message expressions' namespaceObject alike,
// celInput.namespace), declared with the same types in every policy's
// untracked environment (untrackedEnv); CEL functions are pure, so the
// same expression text evaluates to the same value over them. params,
// variables and the authorizer differ between policies and bindings, so
// an expression reading any of them has no key.
func memoKey(expr string, a *cel.Ast) string {
	if !readsInputsOnly(a.NativeRep().Expr(), nil) {
		return ""
	}
	return expr
}

// readsInputsOnly reports whether e reads no variable but the request's
// inputs and the comprehension variables bound around it.
func readsInputsOnly(e ast.Expr, bound []string) bool {
	switch e.Kind() {
	case ast.IdentKind:
		name := e.AsIdent()
		for _, b := range bound {
			if b == name {
				return true
			}
		}
		switch name {
		case plugincel.ObjectVarName, plugincel.OldObjectVarName, plugincel.RequestVarName, plugincel.NamespaceVarName:
			return true
		}
		return false
	case ast.LiteralKind:
		return true
	case ast.SelectKind:
		return readsInputsOnly(e.AsSelect().Operand(), bound)
	case ast.CallKind:
		c := e.AsCall()
		if c.IsMemberFunction() && !readsInputsOnly(c.Target(), bound) {
			return false
		}
		for _, arg := range c.Args() {
			if !readsInputsOnly(arg, bound) {
				return false
			}
		}
		return true
	case ast.ListKind:
		for _, el := range e.AsList().Elements() {
			if !readsInputsOnly(el, bound) {
				return false
			}
		}
		return true
	case ast.MapKind:
		for _, en := range e.AsMap().Entries() {
			me := en.AsMapEntry()
			if !readsInputsOnly(me.Key(), bound) || !readsInputsOnly(me.Value(), bound) {
				return false
			}
		}
		return true
	case ast.StructKind:
		for _, f := range e.AsStruct().Fields() {
			if !readsInputsOnly(f.AsStructField().Value(), bound) {
				return false
			}
		}
		return true
	case ast.ComprehensionKind:
		c := e.AsComprehension()
		if !readsInputsOnly(c.IterRange(), bound) || !readsInputsOnly(c.AccuInit(), bound) {
			return false
		}
		inner := append(append([]string{}, bound...), c.IterVar(), c.AccuVar())
		if c.HasIterVar2() {
			inner = append(inner, c.IterVar2())
		}
		return readsInputsOnly(c.LoopCondition(), inner) && readsInputsOnly(c.LoopStep(), inner) && readsInputsOnly(c.Result(), inner)
	default:
		return false
	}
}

// remember keeps v, the value of the program keyed key over in, for the
// policies after this one, when another evaluation of the policy set
// holds the same key (celInput.shared); an error value is not kept.
// Not safe for concurrent use, as celInput.
func (in *celInput) remember(key string, v ref.Val) {
	if !in.shared[key] || types.IsError(v) {
		return
	}
	if in.memo == nil {
		in.memo = map[string]ref.Val{}
	}
	in.memo[key] = v
}

// sharedKeys are the memoKeys that more than one evaluation of a request
// may hold: keys of several validating policies, or of one policy with
// several bindings (each binding evaluates the policy again). Only their
// values are kept, so a set without repeated expressions keeps none.
func sharedKeys(entries []validatingEntry) map[string]bool {
	counts := map[string]int{}
	for _, e := range entries {
		u := e.policy.untracked
		if u == nil {
			continue
		}
		for _, keys := range [][]string{u.varKeys, u.validationKeys, u.messageKeys} {
			for _, k := range keys {
				if k != "" {
					counts[k] += len(e.bindings)
				}
			}
		}
	}
	shared := map[string]bool{}
	for k, n := range counts {
		if n > 1 {
			shared[k] = true
		}
	}
	return shared
}
