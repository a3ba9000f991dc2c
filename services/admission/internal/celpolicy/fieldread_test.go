package celpolicy

import (
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
)

// TestFieldReads evaluates each expression with cel-go's attribute reads
// and with fieldRead nodes (both with quantifiers, as the untracked twin
// plans them), over the input as cel-go converts it and as the request's
// shared values, each read twice: the same value, or the same error
// message and node; and how many reads were planned as fieldRead.
func TestFieldReads(t *testing.T) {
	env := objEnv(t)
	obj := map[string]any{
		"metadata": map[string]any{"name": "load", "labels": map[string]any{"app": "load"}},
		"data":     map[string]any{"a": "1", "bb": "22"},
		"spec":     map[string]any{"n": float64(3), "on": true, "none": nil, "list": []any{"x", "y"}},
		"nums":     []any{int64(1), int64(2)},
		"s":        "str",
	}
	for _, tc := range []struct {
		expr    string
		planned int // reads planned as fieldRead
		want    string
	}{
		{"obj.metadata.name", 1, "load"},
		{"obj.metadata.name.size() < 64", 1, "true"},
		{"obj.metadata.labels.app == 'load'", 1, "true"},
		{"obj.metadata['name']", 1, "load"},
		{"obj['metadata']['labels']['app']", 1, "load"},
		{"obj.spec.n", 1, "3"},
		{"obj.spec.on", 1, "true"},
		{"obj.spec.none == null", 1, "true"},
		{"obj.spec.list[1]", 0, "y"}, // an int index: cel-go's read
		{"obj.spec.list.size()", 1, "2"},
		{"obj.data.all(k, k.size() < 3)", 5, "true"}, // with the fold's @result reads
		{"obj.data.all(k, obj.data[k].size() == k.size())", 6, "true"},
		{"obj.nums.exists(n, n == 2)", 5, "true"},
		{"'app' in obj.metadata.labels", 1, "true"},
		{"obj", 1, "map[data:map[a:1 bb:22] metadata:map[labels:map[app:load] name:load] nums:[1 2] s:str spec:map[list:[x y] n:3 none:<nil> on:true]]"},
		// Missing fields and wrong kinds of values: cel-go's errors.
		{"obj.metadata.missing", 1, "error: no such key: missing"},
		{"obj.missing.name", 1, "error: no such key: missing"},
		{"obj.s.x", 1, "error: no such key: x"},
		{"obj.spec.n.x", 1, "error: no such key: x"},
		{"obj.nums.x", 1, "error: unsupported index type 'string' in list"},
		{"obj.data.all(k, k.x == 1)", 5, "error: no such key: x"},
		// Optional selections and indexes.
		{"has(obj.metadata.labels)", 1, "true"},
		{"has(obj.metadata.missing)", 1, "false"},
		{"obj.metadata.?labels.orValue({}).app", 1, "load"},
		{"obj.?metadata.name.orValue('')", 1, "load"},
		{"obj.metadata.?missing.orValue({}).size()", 1, "0"},
		{"obj.?missing.?name.hasValue()", 1, "false"},
		{"obj.?missing.name.hasValue()", 1, "false"},
		{"obj.?metadata.missing.hasValue()", 1, "false"},
		{"obj.metadata.?name.value()", 1, "load"},
		{"obj.?s.x", 1, "<nil>"},
		{"obj.s.?x", 1, "<nil>"},
		{"obj.?metadata.name", 1, "load"},
		{"obj.metadata.?missing", 1, "<nil>"},
		{"obj.?s.?x.hasValue()", 1, "false"},
		{"obj.spec.?none.value() == null", 1, "true"},
		{"obj.?nums.x", 1, "error: unsupported index type 'string' in list"},
		{"obj.metadata[?'labels'].orValue({}).size()", 1, "1"},
		// Forms cel-go plans otherwise: presence tests and conditionals
		// (they evaluate the operands' attributes, not their reads), a
		// leading dot that reaches past a comprehension variable.
		{"(obj.s == 'str' ? obj.metadata : obj.data).name", 3, "load"},
		{"(obj.s == 'str' ? obj.metadata.name : obj.s)", 3, "load"},
		{".obj.metadata.name", 1, "load"},                  // checked as obj.metadata.name
		{"obj.data.all(k, .obj.data[k] != '')", 5, "true"}, // not shadowed: checked as obj
		{"obj.nums.all(obj, .obj.s == 'str')", 0, "true"},
		{"obj.nums.all(obj, obj > 0)", 5, "true"},
	} {
		ast, iss := env.Compile(tc.expr)
		if iss.Err() != nil {
			t.Fatalf("%s: %v", tc.expr, iss.Err())
		}
		plain, err := env.Program(ast, cel.InterruptCheckFrequency(celconfig.CheckFrequency), quantifiers(ast, env.CELTypeAdapter(), true))
		if err != nil {
			t.Fatal(err)
		}
		d := newFieldReadDecorator(ast)
		fast, err := env.Program(ast, cel.InterruptCheckFrequency(celconfig.CheckFrequency), cel.CustomDecoratorV2(d.decorate), quantifiers(ast, env.CELTypeAdapter(), true))
		if err != nil {
			t.Fatal(err)
		}
		if len(d.planned) != tc.planned {
			t.Errorf("%s: %d reads planned as fieldRead, want %d", tc.expr, len(d.planned), tc.planned)
		}
		want, _, wantErr := plain.Eval(map[string]any{"obj": obj})
		if w := describe(want, wantErr); w != tc.want {
			t.Errorf("%s: cel-go gives %s, the table says %s", tc.expr, w, tc.want)
		}
		in := share(env.CELTypeAdapter().NativeToValue(obj))
		for _, input := range []any{obj, in, in} {
			got, _, gotErr := fast.Eval(map[string]any{"obj": input})
			if g, w := describeTyped(got, gotErr), describeTyped(want, wantErr); g != w {
				t.Errorf("%s over %T: fieldRead gives %s, cel-go %s", tc.expr, input, g, w)
			}
			if we, ok := want.(*types.Err); ok {
				if ge, ok := got.(*types.Err); !ok || ge.NodeID() != we.NodeID() {
					t.Errorf("%s over %T: error at node %v, want %d", tc.expr, input, got, we.NodeID())
				}
			}
		}
	}
}

// describeTyped is describe with the value's CEL type, so that an
// optional and its value, or optional.none() and null, differ.
func describeTyped(v ref.Val, err error) string {
	if err != nil {
		return describe(v, err)
	}
	return v.Type().(ref.Type).TypeName() + " " + describe(v, err)
}
