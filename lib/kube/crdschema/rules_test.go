package crdschema

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/meridian-cp/meridian/lib/kube/celenv"
)

// rulesRoot is the schema of a CRD with rules where widgets.yaml has
// none: on the resource root (self.metadata), under an atomic map, on an
// embedded resource, on a nullable field, a transition rule on the root
// and one that errors at run time (no such key).
const rulesRoot = `type: object
x-kubernetes-validations:
- rule: "self.metadata.name != 'forbidden' || !has(self.spec)"
- rule: "!has(self.spec) || !has(oldSelf.spec) || !has(self.spec.frozen) || !has(oldSelf.spec.frozen) || self.spec.frozen == oldSelf.spec.frozen"
properties:
  spec:
    type: object
    x-kubernetes-map-type: atomic
    x-kubernetes-validations:
    - rule: "self.a < 3 || self.b == 'small'"
    properties:
      a: {type: integer}
      b: {type: string}
      frozen: {type: string}
      note:
        type: string
        nullable: true
        x-kubernetes-validations:
        - rule: "self != 'black'"
      inner:
        type: object
        properties:
          x:
            type: integer
            x-kubernetes-validations:
            - rule: "self == oldSelf"
      template:
        type: object
        x-kubernetes-embedded-resource: true
        x-kubernetes-validations:
        - rule: "self.kind != 'Secret'"
        properties:
          data: {type: string}
`

// TestPassRulesMatchesUpstream: on random objects and random old objects,
// passRules answers "every rule holds" exactly when upstream's validator
// returns no error, for schemas it covers; so using it changes no
// admission.
func TestPassRulesMatchesUpstream(t *testing.T) {
	schemas := map[string]*Schema{
		"widgets": compile(t, "widgets.yaml", "v1"),
		"bench":   compile(t, "bench.yaml", "v1"),
	}
	gadget, err := Compile(parseCRD(t, crdWithRootSchema(rulesRoot)), "v1")
	if err != nil {
		t.Fatal(err)
	}
	schemas["gadgets"] = gadget
	ctx := context.Background()
	for name, s := range schemas {
		t.Run(name, func(t *testing.T) {
			if s.rules == nil {
				t.Fatal("passRules does not cover the schema")
			}
			r := rand.New(rand.NewPCG(1, uint64(len(name))))
			var passed, failed int
			for i := range 4000 {
				obj := randomValue(r, s.structural, 0).(map[string]any)
				var old map[string]any
				if r.IntN(2) == 0 {
					old = randomValue(r, s.structural, 0).(map[string]any)
				}
				var oldObj any
				if old != nil {
					oldObj = old
				}
				errs, _ := s.celValidator.Validate(ctx, nil, s.structural, obj, oldObj, celenv.RuntimeBudget)
				got := s.rules.pass(ctx, obj, old, celenv.RuntimeBudget)
				if got != (len(errs) == 0) {
					t.Fatalf("case %d: pass = %v, upstream errors %v\nobject %v\nold %v", i, got, errs, obj, old)
				}
				if got {
					passed++
				} else {
					failed++
				}
			}
			// Both answers must be common, or the comparison says little.
			if passed < 200 || failed < 200 {
				t.Fatalf("passed %d, failed %d of 4000: the generated cases do not exercise both answers", passed, failed)
			}
		})
	}
}

// TestPassRulesBudget: a budget the rules overspend is not a pass, so
// upstream's validator reports the budget error.
func TestPassRulesBudget(t *testing.T) {
	s := compile(t, "bench.yaml", "v1")
	obj := benchObject(t).Object
	if !s.rules.pass(context.Background(), obj, nil, celenv.RuntimeBudget) {
		t.Fatal("the bench object does not pass")
	}
	if s.rules.pass(context.Background(), obj, nil, 1) {
		t.Fatal("passed within a budget of 1")
	}
	s.budget = 1
	_, errs := s.Admit(context.Background(), &unstructured.Unstructured{Object: obj}, nil, "")
	if !slices.ContainsFunc(errStrings(errs), func(e string) bool {
		return e == "spec: Invalid value: \"object\": validation failed due to running out of cost budget, no further validation rules will be run"
	}) {
		t.Fatalf("errors = %v, want the budget error", errStrings(errs))
	}
}

// TestPassRulesOutOfReach: rules under items are left to upstream's
// validator alone.
func TestPassRulesOutOfReach(t *testing.T) {
	s := compile(t, "costly.yaml", "v1")
	if s.celValidator == nil || s.rules != nil {
		t.Fatalf("celValidator %v, rules %v: want upstream's validator alone", s.celValidator != nil, s.rules != nil)
	}
	if compileRules(&structuralschema.Structural{Generic: structuralschema.Generic{Type: "object"}}) != nil {
		t.Fatal("rules for a schema without rules")
	}
}

// randomValue is a random JSON value for st: mostly of the schema's type
// from a small pool (so rules both hold and fail, and old values often
// equal new ones), sometimes null or of another type.
func randomValue(r *rand.Rand, st *structuralschema.Structural, depth int) any {
	if depth > 0 {
		switch r.IntN(12) {
		case 0:
			return nil
		case 1:
			return []any{"x"}
		case 2:
			return "wrong"
		}
	}
	if st.XIntOrString {
		if r.IntN(2) == 0 {
			return int64(r.IntN(3))
		}
		return "http"
	}
	switch st.Type {
	case "object":
		m := map[string]any{}
		for k := range st.Properties {
			if r.IntN(4) == 0 {
				continue
			}
			prop := st.Properties[k]
			m[k] = randomValue(r, &prop, depth+1)
		}
		if st.XEmbeddedResource || depth == 0 {
			m["apiVersion"] = "example.com/v1"
			m["kind"] = []string{"Gadget", "Secret", "Widget"}[r.IntN(3)]
			m["metadata"] = map[string]any{"name": []string{"forbidden", "ok"}[r.IntN(2)], "namespace": "default"}
		}
		if st.AdditionalProperties != nil && st.AdditionalProperties.Structural != nil {
			for i := range r.IntN(3) {
				m[fmt.Sprintf("k%d", i)] = randomValue(r, st.AdditionalProperties.Structural, depth+1)
			}
		}
		return m
	case "array":
		l := make([]any, r.IntN(4))
		for i := range l {
			if st.Items != nil {
				l[i] = randomValue(r, st.Items, depth+1)
			}
		}
		return l
	case "integer":
		return int64(r.IntN(7) - 1)
	case "number":
		return float64(r.IntN(3)) / 2
	case "boolean":
		return r.IntN(2) == 0
	case "string":
		return []string{"small", "large", "black", "red", "green", "value-1", "other", ""}[r.IntN(8)]
	}
	return nil
}
