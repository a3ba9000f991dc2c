package celpolicy

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	celconfig "k8s.io/apiserver/pkg/apis/cel"

	"github.com/meridian-cp/meridian/lib/kube/celenv"
)

// TestQuantifiers evaluates each expression with cel-go's folds and with
// quantifiers in the untracked twin: the same value, or the same error
// (message and node), and the number of comprehensions replaced.
func TestQuantifiers(t *testing.T) {
	env := objEnv(t)
	obj := map[string]any{
		"data":   map[string]any{"a": "1", "bb": "22"},
		"nums":   []any{int64(1), int64(2), int64(0), int64(3)},
		"empty":  []any{},
		"nested": []any{[]any{int64(1), int64(2)}, []any{int64(3)}},
		"mixed":  []any{int64(1), "a", true},
		"n":      int64(5),
	}
	for _, tc := range []struct {
		expr     string
		replaced int // comprehensions evaluated as quantifiers
		want     string
	}{
		{"obj.data.all(k, k.size() < 2)", 1, "false"},
		{"obj.data.all(k, k.size() < 3)", 1, "true"},
		{"obj.data.exists(k, k == 'bb')", 1, "true"},
		{"obj.data.exists(k, k == 'c')", 1, "false"},
		{"obj.empty.all(x, false)", 1, "true"},
		{"obj.empty.exists(x, true)", 1, "false"},
		// Errors are absorbed by a false (all) or a true (exists) at any
		// position, else the first error is the result.
		{"obj.nums.all(n, 10 / n > 0)", 1, "error: division by zero"},
		{"obj.nums.all(n, 10 / n > 5)", 1, "false"},
		{"obj.nums.all(n, 10 / n < 4)", 1, "false"},
		{"obj.nums.all(n, n == 0 || 10 / n > 0)", 1, "true"},
		{"obj.nums.exists(n, 10 / n == 5)", 1, "true"},
		{"obj.nums.exists(n, 10 / n == 3)", 1, "true"},
		{"obj.nums.exists(n, 10 / n == 7)", 1, "error: division by zero"},
		{"obj.mixed.all(v, v > 0)", 1, "error: no such overload"},
		{"obj.mixed.all(v, v == 1)", 1, "false"},
		{"obj.mixed.exists(v, v == 'a')", 1, "true"},
		{"obj.mixed.all(v, v)", 1, "error: no such overload"},
		{"obj.mixed.exists(v, v)", 1, "true"},
		{"obj.nums.all(n, n / 0 > 1 && obj.missing > 1)", 1, "error: division by zero"},
		{"obj.nums.exists(n, obj.missing == n)", 1, "error: no such key: missing"},
		// Ranges that are not lists or maps, or fail.
		{"obj.n.all(x, x > 0)", 1, "error: got 'types.Int', expected iterable type"},
		{"obj.missing.exists(x, true)", 1, "error: no such key: missing"},
		// The iteration variable: converted, shadowed, read with the input.
		{"obj.data.all(k, obj.data[k].size() == k.size())", 1, "true"},
		{"obj.nested.all(l, l.all(n, n > 0))", 2, "true"},
		{"obj.nested.exists(l, l.exists(n, n == 3))", 2, "true"},
		{"obj.nums.all(n, obj.nested.all(n, n.size() > 0))", 2, "true"},
		{"obj.nums.all(n, obj.nested.exists(l, l.exists(m, m == n)) || n == 0)", 3, "true"},
		{"obj.nums.map(n, n * 2).all(n, n < 10)", 1, "true"},
		{"obj.nums.filter(n, n > 0).exists(n, n == 3)", 1, "true"},
		{"!obj.data.all(k, k == 'a')", 1, "true"},
		{"obj.nums.all(n, n >= 0) && obj.data.exists(k, k.startsWith('b'))", 2, "true"},
		{"obj.data.all(k, k.size() > 1 ? true : 1 / 0 == 1)", 1, "error: division by zero"},
		{"obj.nums.all(n, [n].all(m, m == n))", 1, "true"}, // [n] is a list literal
		{"obj.nums.all(n, n == 0 ? obj.missing : 10 / (n - 1) > 0)", 1, "error: division by zero"},
		{"obj.nums.exists(n, n == 0 ? obj.missing : 10 / (n - 1) < 0)", 1, "error: division by zero"},
		{"obj.nums.all(n, n < 2 ? 10 / (n - 1) > 0 : n != 0)", 1, "false"},
		// Kept as cel-go's folds: other comprehensions, two variables, and
		// ranges or predicates cel-go's decorators rewrite.
		{"obj.nums.exists_one(n, n == 2)", 0, "true"},
		{"obj.data.all(k, v, v.size() > 0)", 0, "true"},
		{"[0, 5].exists(n, n == 5)", 0, "true"},
		{"obj.data.all(k, k.matches('^[ab]+$'))", 0, "true"},
		{"obj.data.all(k, k in ['a', 'bb'])", 0, "true"},
		{"obj.data.all(k, k in ['a', 'bb'] && k.size() > 0)", 1, "true"},
	} {
		ast, iss := env.Compile(tc.expr)
		if iss.Err() != nil {
			t.Fatalf("%s: %v", tc.expr, iss.Err())
		}
		plain, err := env.Program(ast, cel.InterruptCheckFrequency(celconfig.CheckFrequency))
		if err != nil {
			t.Fatal(err)
		}
		d := newQuantifierDecorator(ast, env.CELTypeAdapter(), true)
		found := len(d.folds)
		fast, err := env.Program(ast, cel.InterruptCheckFrequency(celconfig.CheckFrequency), cel.CustomDecoratorV2(d.decorate))
		if err != nil {
			t.Fatal(err)
		}
		if got := found - len(d.folds); got != tc.replaced {
			t.Errorf("%s: %d comprehensions replaced, want %d", tc.expr, got, tc.replaced)
		}
		want, _, wantErr := plain.Eval(map[string]any{"obj": obj})
		if w := describe(want, wantErr); w != tc.want {
			t.Errorf("%s: cel-go's fold gives %s, the table says %s", tc.expr, w, tc.want)
		}
		// The input as cel-go converts it, and as the request's shared
		// values (which quantifiers iterate without an iterator).
		for _, in := range []any{obj, share(env.CELTypeAdapter().NativeToValue(obj))} {
			got, _, gotErr := fast.Eval(map[string]any{"obj": in})
			if g, w := describe(got, gotErr), describe(want, wantErr); g != w {
				t.Errorf("%s over %T: quantifier gives %s, cel-go's fold %s", tc.expr, in, g, w)
			}
			if we, ok := want.(*types.Err); ok {
				if ge, ok := got.(*types.Err); !ok || ge.NodeID() != we.NodeID() {
					t.Errorf("%s over %T: error at node %v, want %d", tc.expr, in, got, we.NodeID())
				}
			}
		}
	}
}

// TestQuantifierInterrupted: a quantifier stops when the evaluation's
// context ends, with cel-go's interrupt error, as the fold does.
func TestQuantifierInterrupted(t *testing.T) {
	env := objEnv(t)
	ast, iss := env.Compile("obj.all(x, obj.all(y, x + y >= 0))")
	if iss.Err() != nil {
		t.Fatal(iss.Err())
	}
	fast, err := env.Program(ast, cel.InterruptCheckFrequency(celconfig.CheckFrequency), quantifiers(ast, env.CELTypeAdapter(), true))
	if err != nil {
		t.Fatal(err)
	}
	list := make([]any, 1000)
	for i := range list {
		list[i] = int64(i)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := fast.ContextEval(ctx, map[string]any{"obj": list}); err == nil || !strings.Contains(err.Error(), "operation interrupted") {
		t.Fatalf("cancelled: %v, want operation interrupted", err)
	}
	if v, _, err := fast.ContextEval(context.Background(), map[string]any{"obj": list}); err != nil || v != types.True {
		t.Fatalf("not cancelled: %v, %v", v, err)
	}
}

// objEnv is the untracked twin's environment with obj, a dyn variable.
func objEnv(t *testing.T) *cel.Env {
	t.Helper()
	twin, err := celenv.Untracked()
	if err != nil {
		t.Fatal(err)
	}
	env, err := twin.StoredExpressionsEnv().Extend(cel.Variable("obj", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// describe is a result as the tests compare it.
func describe(v ref.Val, err error) string {
	if err != nil {
		return "error: " + err.Error()
	}
	return fmt.Sprint(v.Value())
}
