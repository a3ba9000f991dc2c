package celpolicy

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	apiservercel "k8s.io/apiserver/pkg/cel"
)

// variablesValue is the `variables` value of one untracked list's
// activation. It behaves as k8s.io/apiserver's lazy.MapValue, which the
// tracked path binds (each variable evaluated on its first read, at most
// once per list; an evaluation error marks the run failed), but its type
// and its name index are built once per policy (untracked.varsValType,
// untracked.varIndex) and it reads field names without a regular
// expression when they hold no escape sequence.
type variablesValue struct {
	run    *untrackedRun
	values []ref.Val // nil entries: not evaluated yet
}

var (
	_ ref.Val       = (*variablesValue)(nil)
	_ traits.Mapper = (*variablesValue)(nil)
)

// resolve returns variable i, evaluating it on first use.
func (m *variablesValue) resolve(i int) ref.Val {
	if v := m.values[i]; v != nil {
		return v
	}
	u := m.run.u
	v, err := m.run.evalProgram(u.vars[i], u.varKeys[i])
	if err != nil {
		m.run.failed = true
		v = types.NewErr("composited variable %q fails to evaluate: %v", u.varNames[i], err)
	}
	m.values[i] = v
	return v
}

// index is the position of the variable key names, as lazy.MapValue
// finds it (names unescaped).
func (m *variablesValue) index(key ref.Val) (int, bool) {
	n, ok := key.(types.String)
	if !ok {
		return -1, false
	}
	name := string(n)
	if strings.Contains(name, "__") { // may hold an escape sequence
		if name, ok = apiservercel.Unescape(name); !ok {
			return -1, false
		}
	}
	i, ok := m.run.u.varIndex[name]
	return i, ok
}

// Find implements traits.Mapper.
func (m *variablesValue) Find(key ref.Val) (ref.Val, bool) {
	if _, ok := key.(types.String); !ok {
		// lazy.MapValue answers with its zero key's error.
		return types.MaybeNoSuchOverloadErr(types.String("")), true
	}
	i, ok := m.index(key)
	if !ok {
		return nil, false
	}
	return m.resolve(i), true
}

// Get implements traits.Indexer.
func (m *variablesValue) Get(key ref.Val) ref.Val {
	if v, found := m.Find(key); found {
		return v
	}
	return types.ValOrErr(key, "no such key: %v", key)
}

// Contains implements traits.Container.
func (m *variablesValue) Contains(key ref.Val) ref.Val {
	v, found := m.Find(key)
	if v != nil && types.IsUnknownOrError(v) {
		return v
	}
	return types.Bool(found)
}

// Iterator implements traits.Iterable. As lazy.MapValue's, it yields the
// variables' values in order.
func (m *variablesValue) Iterator() traits.Iterator {
	return &variablesIterator{parent: m}
}

// Size implements traits.Sizer.
func (m *variablesValue) Size() ref.Val { return types.Int(len(m.values)) }

// ConvertToNative is disallowed, as for lazy.MapValue.
func (m *variablesValue) ConvertToNative(typeDesc reflect.Type) (any, error) {
	return nil, fmt.Errorf("disallowed conversion from %q to %q", m.run.u.varsValType.TypeName(), typeDesc.Name())
}

// ConvertToType converts to its own type and to type only.
func (m *variablesValue) ConvertToType(typeVal ref.Type) ref.Val {
	switch typeVal {
	case m.run.u.varsValType:
		return m
	case types.TypeType:
		return m.run.u.varsValType
	}
	return types.NewErr("disallowed conversion from %q to %q", m.run.u.varsValType.TypeName(), typeVal.TypeName())
}

// Equal is identity, as for lazy.MapValue.
func (m *variablesValue) Equal(other ref.Val) ref.Val {
	o, ok := other.(*variablesValue)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	return types.Bool(m == o)
}

// Type is the variables' object type.
func (m *variablesValue) Type() ref.Type { return m.run.u.varsValType }

// Value is not allowed.
func (m *variablesValue) Value() any { return types.NoSuchOverloadErr() }

// variablesIterator iterates over the variables' values.
type variablesIterator struct {
	parent *variablesValue
	i      int
}

func (it *variablesIterator) ConvertToNative(typeDesc reflect.Type) (any, error) {
	return nil, fmt.Errorf("disallowed conversion to %q", typeDesc.Name())
}

func (it *variablesIterator) ConvertToType(typeValue ref.Type) ref.Val {
	return types.NewErr("disallowed conversion o %q", typeValue.TypeName())
}

func (it *variablesIterator) Equal(other ref.Val) ref.Val {
	o, ok := other.(*variablesIterator)
	if !ok {
		return types.MaybeNoSuchOverloadErr(other)
	}
	return types.Bool(o == it)
}

func (it *variablesIterator) Type() ref.Type { return types.IteratorType }

func (it *variablesIterator) Value() any { return nil }

func (it *variablesIterator) HasNext() ref.Val { return types.Bool(it.i < len(it.parent.values)) }

func (it *variablesIterator) Next() ref.Val {
	if it.i >= len(it.parent.values) {
		return types.NewErr("no more elements")
	}
	it.i++
	return it.parent.resolve(it.i - 1)
}
