package crdschema

import (
	"context"
	"math"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/interpreter"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model"
	"k8s.io/apiextensions-apiserver/pkg/features"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/common"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/utils/ptr"

	"github.com/meridian-cp/meridian/lib/kube/celenv"
)

// passRules is a quicker way to learn that every x-kubernetes-validations
// rule of an object holds. It runs the same rules, compiled by upstream's
// cel.Compile in the same environment with the same declared types, on the
// same values with the same runtime budget; it differs from upstream's
// cel.Validator only in the schema adaptor the values are read through.
// Upstream wraps the structural schema in model.Structural on every
// evaluation, whose Properties builds a new map and a wrapper per property
// on each field access; passRules builds those once (celSchema).
//
// It answers only "all rules hold": whenever a rule is false, fails to
// evaluate or exceeds a cost limit, the caller runs upstream's validator,
// which produces the errors, messages (messageExpression, reason,
// fieldPath), ratcheting warnings and budget errors itself. An object whose
// rules all hold gets no errors and no warnings from upstream either, so
// the result is the same.
//
// passRules covers schemas whose rules sit on nodes reached from the root
// through properties only; compileRules returns nil for any other schema
// (rules under items, additionalProperties or allOf), and Admit uses
// upstream's validator alone.
type passRules struct {
	nodes []ruleNode
}

// ruleNode is one schema node with rules: where it is and what it runs.
type ruleNode struct {
	// path is the node's property names from the root.
	path []string
	// correlated[i] tells whether the old value of path[i] is looked up
	// (upstream passes the old value into a property only when the
	// enclosing map's x-kubernetes-map-type is correlatable).
	correlated []bool
	// schema is the adaptor values at the node are read through (with
	// apiVersion, kind and metadata added at a resource root, as upstream).
	schema common.Schema
	rules  []cel.CompilationResult
	// optionalOldSelf[i] is rule i's optionalOldSelf.
	optionalOldSelf []bool
}

// compileRules compiles the rules of st for passRules, nil when st has no
// rules or has rules passRules does not cover.
func compileRules(st *structuralschema.Structural) *passRules {
	if st == nil {
		return nil
	}
	p := &passRules{}
	if !p.add(st, model.SchemaDeclType(st, true), true, nil, nil) || len(p.nodes) == 0 {
		return nil
	}
	return p
}

// add compiles the rules of node st (declared as declType) and of its
// properties; it reports false when a rule is out of passRules' reach or
// does not compile.
func (p *passRules) add(st *structuralschema.Structural, declType *apiservercel.DeclType, resourceRoot bool, path []string, correlated []bool) bool {
	if st.ValueValidation != nil && len(st.ValueValidation.AllOf) > 0 {
		return false
	}
	if (st.Items != nil && hasRules(st.Items)) || (st.AdditionalProperties != nil && hasRules(st.AdditionalProperties.Structural)) {
		return false
	}
	if len(st.XValidations) > 0 {
		if declType == nil {
			return false
		}
		rules, err := cel.Compile(st, declType, celenv.PerCallLimit, celenv.Base(), cel.StoredExpressionsEnvLoader())
		if err != nil {
			return false
		}
		n := ruleNode{path: path, correlated: correlated, rules: rules}
		for i, r := range rules {
			if r.Error != nil {
				return false
			}
			n.optionalOldSelf = append(n.optionalOldSelf, ptr.Deref(st.XValidations[i].OptionalOldSelf, false))
		}
		node := st
		if resourceRoot {
			node = model.WithTypeAndObjectMeta(st)
		}
		n.schema = newCELSchema(node)
		p.nodes = append(p.nodes, n)
	}
	correlatable := cel.MapIsCorrelatable(st.XMapType)
	for k := range st.Properties {
		prop := st.Properties[k]
		if !hasRules(&prop) {
			continue
		}
		// The property's declared type, found as upstream's validator
		// finds it; a property without one is not validated by CEL.
		var fieldType *apiservercel.DeclType
		if escaped, ok := apiservercel.Escape(k); ok {
			if declType == nil {
				continue
			}
			f, ok := declType.Fields[escaped]
			if !ok {
				continue
			}
			fieldType = f.Type
		} else if fieldType = model.SchemaDeclType(&prop, prop.XEmbeddedResource); fieldType == nil {
			continue
		}
		subPath := append(append([]string(nil), path...), k)
		subCorrelated := append(append([]bool(nil), correlated...), correlatable)
		if !p.add(&prop, fieldType, prop.XEmbeddedResource, subPath, subCorrelated) {
			return false
		}
	}
	return true
}

// hasRules reports whether st or any schema below it has rules.
func hasRules(st *structuralschema.Structural) bool {
	if st == nil {
		return false
	}
	if len(st.XValidations) > 0 {
		return true
	}
	if st.ValueValidation != nil && len(st.ValueValidation.AllOf) > 0 {
		// Rules inside allOf: out of passRules' reach either way.
		return true
	}
	if hasRules(st.Items) {
		return true
	}
	if st.AdditionalProperties != nil && hasRules(st.AdditionalProperties.Structural) {
		return true
	}
	for k := range st.Properties {
		prop := st.Properties[k]
		if hasRules(&prop) {
			return true
		}
	}
	return false
}

// pass reports whether every rule holds for obj (old is the stored object
// on update, nil on create) within budget. false means "ask upstream's
// validator", not that a rule failed.
func (p *passRules) pass(ctx context.Context, obj, old map[string]any, budget int64) bool {
	remaining := budget
	for i := range p.nodes {
		n := &p.nodes[i]
		v, oldV, ok := n.values(obj, old)
		if !ok {
			// The node is absent (or below a value that is not an
			// object): upstream does not run its rules.
			continue
		}
		for j, rule := range n.rules {
			if rule.Program == nil {
				continue
			}
			optional := n.optionalOldSelf[j]
			if rule.UsesOldSelf && oldV == nil && (!optional || !utilfeature.DefaultFeatureGate.Enabled(features.CRDValidationRatcheting)) {
				// A transition rule without an old value is not run.
				continue
			}
			act := &ruleActivation{self: common.UnstructuredToVal(v, n.schema)}
			switch {
			case oldV != nil && optional:
				act.oldSelf, act.hasOldSelf = types.OptionalOf(common.UnstructuredToVal(oldV, n.schema)), true
			case oldV != nil:
				act.oldSelf, act.hasOldSelf = common.UnstructuredToVal(oldV, n.schema), true
			case optional:
				act.oldSelf, act.hasOldSelf = types.OptionalNone, true
			}
			result, details, err := rule.Program.ContextEval(ctx, act)
			if err != nil || details == nil || result != types.True {
				return false
			}
			cost := details.ActualCost()
			if cost == nil || *cost > math.MaxInt64 || int64(*cost) > remaining {
				return false
			}
			remaining -= int64(*cost)
		}
	}
	return true
}

// values finds the node's value in obj and its old value in old (nil when
// there is none or it is not correlated); ok is false when the node has no
// non-null value.
func (n *ruleNode) values(obj, old map[string]any) (v, oldV any, ok bool) {
	v = obj
	if old != nil {
		oldV = old
	}
	for i, k := range n.path {
		m, isMap := v.(map[string]any)
		if !isMap {
			return nil, nil, false
		}
		v = m[k]
		if oldMap, isMap := oldV.(map[string]any); isMap && n.correlated[i] {
			oldV = oldMap[k]
		} else {
			oldV = nil
		}
	}
	// Upstream treats an old value that is a nil map or slice as absent.
	switch o := oldV.(type) {
	case map[string]any:
		if o == nil {
			oldV = nil
		}
	case []any:
		if o == nil {
			oldV = nil
		}
	}
	return v, oldV, v != nil
}

// ruleActivation resolves self and oldSelf, as upstream's activation.
type ruleActivation struct {
	self, oldSelf any
	hasOldSelf    bool
}

// ResolveName implements interpreter.Activation.
func (a *ruleActivation) ResolveName(name string) (any, bool) {
	switch name {
	case cel.ScopedVarName:
		return a.self, true
	case cel.OldScopedVarName:
		return a.oldSelf, a.hasOldSelf
	}
	return nil, false
}

// Parent implements interpreter.Activation.
func (a *ruleActivation) Parent() interpreter.Activation { return nil }

// celSchema is model.Structural with its properties, items and additional
// properties adapted once, when the schema is compiled, instead of on every
// access. It is immutable and shared by concurrent evaluations.
type celSchema struct {
	*model.Structural
	properties           map[string]common.Schema
	items                common.Schema
	additionalProperties common.SchemaOrBool
}

// newCELSchema adapts st and every schema below it.
func newCELSchema(st *structuralschema.Structural) *celSchema {
	s := &celSchema{Structural: &model.Structural{Structural: st}}
	if st.Properties != nil {
		s.properties = make(map[string]common.Schema, len(st.Properties))
		for k := range st.Properties {
			prop := st.Properties[k]
			s.properties[k] = newCELSchema(&prop)
		}
	}
	if st.Items != nil {
		s.items = newCELSchema(st.Items)
	}
	if st.AdditionalProperties != nil {
		ap := &celSchemaOrBool{allows: st.AdditionalProperties.Bool}
		if st.AdditionalProperties.Structural != nil {
			ap.schema = newCELSchema(st.AdditionalProperties.Structural)
		}
		s.additionalProperties = ap
	}
	return s
}

// Properties implements common.Schema.
func (s *celSchema) Properties() map[string]common.Schema { return s.properties }

// Items implements common.Schema.
func (s *celSchema) Items() common.Schema { return s.items }

// AdditionalProperties implements common.Schema.
func (s *celSchema) AdditionalProperties() common.SchemaOrBool { return s.additionalProperties }

// celSchemaOrBool is model.StructuralOrBool adapted once.
type celSchemaOrBool struct {
	schema *celSchema
	allows bool
}

// Schema implements common.SchemaOrBool.
func (s *celSchemaOrBool) Schema() common.Schema {
	if s.schema == nil {
		return nil
	}
	return s.schema
}

// Allows implements common.SchemaOrBool.
func (s *celSchemaOrBool) Allows() bool { return s.allows }
