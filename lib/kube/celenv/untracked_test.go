package celenv

import (
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"k8s.io/apiserver/pkg/cel/library"
)

// twinOutcome is what one environment makes of an expression: its
// compile issues (empty: compiled), its output type, and its evaluation
// (value or error) against the test object.
type twinOutcome struct {
	issues, outType, evalErr string
	val                      ref.Val
	costTracked              bool
}

func outcome(t *testing.T, env *cel.Env, expr string, obj map[string]any) twinOutcome {
	t.Helper()
	env, err := env.Extend(cel.Variable("object", cel.DynType))
	if err != nil {
		t.Fatalf("Extend: %v", err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return twinOutcome{issues: iss.Err().Error()}
	}
	o := twinOutcome{outType: ast.OutputType().String()}
	prg, err := env.Program(ast)
	if err != nil {
		t.Fatalf("Program(%s): %v", expr, err)
	}
	val, det, err := prg.Eval(map[string]any{"object": obj})
	if err != nil {
		o.evalErr = err.Error()
	}
	o.val = val
	o.costTracked = det != nil && det.ActualCost() != nil
	return o
}

// TestUntrackedTwin: the untracked twin accepts, rejects and evaluates
// every expression exactly as Base does, in both the new-expressions and
// the stored-expressions environment, over every library of the base
// environment; and only Base's programs track cost.
func TestUntrackedTwin(t *testing.T) {
	twin, err := Untracked()
	if err != nil {
		t.Fatal(err)
	}
	obj := map[string]any{
		"metadata": map[string]any{"name": "web-1", "labels": map[string]any{"env": "prod"}},
		"spec":     map[string]any{"replicas": int64(3), "items": []any{int64(1), int64(2), int64(3)}, "host": "10.0.0.1"},
	}
	exprs := []string{
		// core, macros, bindings
		"object.spec.replicas <= 5",
		"object.spec.items.all(i, i > 0) && object.spec.items.exists_one(i, i == 2)",
		"object.spec.items.map(i, i * 2).filter(i, i > 2) == [4, 6]",
		"has(object.metadata.labels) && !has(object.metadata.annotations)",
		"cel.bind(n, object.metadata.name, n + n) == 'web-1web-1'", // bindings: not in the base environment
		"1 < 1.5 && 2u < 3.5", // cross-type numeric comparisons
		"[1, 'a']",            // homogeneous aggregate literals: rejected
		"object.spec.replicas.unknownFunction()",
		"1 + 'a'",
		"object.spec.items[7]", // evaluation error
		// lists (k8s and ext)
		"object.spec.items.isSorted() && [1, 2, 3].sum() == 6",
		"[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3",
		"[1, 2, 2, 3].indexOf(2) == 1 && [1, 2, 2, 3].lastIndexOf(2) == 2",
		"[[1], [2, 3]].flatten() == [1, 2, 3] && lists.range(3) == [0, 1, 2]",
		"[3, 1, 2].sort() == [1, 2, 3] && [1, 2, 2].distinct() == [1, 2] && [1, 2].reverse() == [2, 1]",
		"[1, 2, 3, 4].slice(1, 3) == [2, 3]",
		"[{'a': 2}, {'a': 1}].sortBy(e, e.a)[0].a == 1",
		// sets
		"sets.contains([1, 2, 3], [2, 3]) && sets.equivalent([1, 2], [2, 1]) && sets.intersects([1], [1, 5])",
		// regex
		"'abc 123'.find('[0-9]+') == '123' && '123 abc 456'.findAll('[0-9]+') == ['123', '456']",
		"object.metadata.name.matches('^web-[0-9]+$')",
		"'abc'.matches('[')", // bad regex literal: rejected by the validator
		// strings ext v2
		"'a,b'.split(',') == ['a', 'b'] && 'Hello'.lowerAscii() == 'hello' && 'hello'.upperAscii() == 'HELLO'",
		"'  x '.trim() == 'x' && 'abc'.replace('b', 'z') == 'azc' && 'abc'.substring(1) == 'bc'",
		"'abc'.charAt(1) == 'b' && 'abcabc'.indexOf('c') == 2 && 'abcabc'.lastIndexOf('c') == 5",
		"['a', 'b'].join('-') == 'a-b' && strings.quote('a\"b') == '\"a\\\\\"b\"'",
		"'%s-%d'.format(['a', 1]) == 'a-1'",
		"'abc'.reverse() == 'cba'", // strings v3: not in the base environment
		// urls
		"url('https://example.com:80/path').getHost() == 'example.com:80' && isURL('https://example.com/') && !isURL('not a url')",
		"url('https://example.com/p?q=1').getQuery()['q'] == ['1'] && url('https://x.io/a').getEscapedPath() == '/a'",
		// quantity
		"quantity('1Gi').isGreaterThan(quantity('100Mi')) && isQuantity('1Ki')",
		"quantity('500m').add(quantity('500m')).compareTo(quantity('1')) == 0 && quantity('1.5').asApproximateFloat() == 1.5",
		"quantity('nope')",
		// ip, cidr
		"ip('10.0.0.1').family() == 4 && isIP('fe80::1') && ip(object.spec.host).isLoopback() == false",
		"cidr('10.0.0.0/8').containsIP(ip('10.1.2.3')) && cidr('192.168.0.0/24').prefixLength() == 24 && isCIDR('10.0.0.0/8')",
		"cidr('10.0.0.0/8').masked() == cidr('10.0.0.0/8') && cidr('10.0.0.0/8').ip() == ip('10.0.0.0')",
		// semver
		"semver('1.2.3').isLessThan(semver('1.10.0')) && isSemver('v1.0.0', true) && !isSemver('v1.0.0')",
		"semver('1.2.3').major() == 1 && semver('1.2.3').compareTo(semver('1.2.3')) == 0",
		// format
		"!format.dns1123Label().validate('web-1').hasValue() && format.dns1123Label().validate('Web_1').hasValue()",
		"format.named('dns1123Subdomain').value().validate('a.b').hasValue() == false",
		// optional types incl. or/orValue
		"object.metadata.?annotations.orValue({}).size() == 0 && object.metadata.labels[?'env'].orValue('') == 'prod'",
		"object.metadata.?annotations.or(object.metadata.?labels).hasValue()",
		"optional.of(1).value() == 1 && !optional.none().hasValue() && [?optional.of(2)] == [2]",
		"{?'k': optional.none()}.size() == 0",
		// two-variable comprehensions
		"object.metadata.labels.all(k, v, k != '' && v != '') && [5, 6].exists(i, v, i == 1 && v == 6)",
		"{'a': 1}.transformMap(k, v, v + 1) == {'a': 2} && [1, 2].transformList(i, v, i + v) == [1, 3]",
		// timestamps and durations
		"timestamp('2026-01-01T00:00:00Z') < timestamp('2026-06-01T00:00:00Z') && duration('1h') > duration('59m')",
		"timestamp('not a time')",                           // rejected by the literal validator
		"timestamp('2026-01-01T00:00:00Z').getHours() == 0", // UTC default time zone
		// authz (declared; an expression needs the authorizer variable to run)
		"type(1) == int",
	}
	// rejected are the table's expressions both environments refuse.
	rejected := map[string]bool{
		"[1, 'a']": true, "object.spec.replicas.unknownFunction()": true, "1 + 'a'": true,
		"'abc'.matches('[')": true, "timestamp('not a time')": true,
		"'abc'.reverse() == 'cba'": true, "cel.bind(n, object.metadata.name, n + n) == 'web-1web-1'": true,
	}
	base := Base()
	for _, c := range []struct {
		name       string
		base, twin *cel.Env
	}{
		{"new", base.NewExpressionsEnv(), twin.NewExpressionsEnv()},
		{"stored", base.StoredExpressionsEnv(), twin.StoredExpressionsEnv()},
	} {
		for _, expr := range exprs {
			t.Run(c.name+"/"+expr, func(t *testing.T) {
				b, u := outcome(t, c.base, expr, obj), outcome(t, c.twin, expr, obj)
				if b.issues != u.issues || b.outType != u.outType || b.evalErr != u.evalErr {
					t.Fatalf("Base: issues %q type %q error %q; twin: issues %q type %q error %q", b.issues, b.outType, b.evalErr, u.issues, u.outType, u.evalErr)
				}
				if rejected[expr] != (b.issues != "") {
					t.Fatalf("compile issues %q, want rejected = %v", b.issues, rejected[expr])
				}
				if b.issues != "" {
					return
				}
				if b.evalErr == "" && b.val.Equal(u.val) != types.True {
					t.Fatalf("Base = %v, twin = %v", b.val, u.val)
				}
				if !b.costTracked || u.costTracked {
					t.Fatalf("cost tracked: Base %v (want true), twin %v (want false)", b.costTracked, u.costTracked)
				}
			})
		}
	}
}

// TestUntrackedCostEstimates: the twin's estimator options equal Base's,
// so an expression's estimated cost is the same in both (has() is free).
func TestUntrackedCostEstimates(t *testing.T) {
	twin, err := Untracked()
	if err != nil {
		t.Fatal(err)
	}
	for _, expr := range []string{"has(object.a) && has(object.b)", "'abc'.matches('a+')", "[1, 2, 3].all(x, x > 0)"} {
		var est [2]checker.CostEstimate
		for i, env := range []*cel.Env{Base().StoredExpressionsEnv(), twin.StoredExpressionsEnv()} {
			env, err := env.Extend(cel.Variable("object", cel.DynType))
			if err != nil {
				t.Fatal(err)
			}
			ast, iss := env.Compile(expr)
			if iss.Err() != nil {
				t.Fatal(iss.Err())
			}
			if est[i], err = env.EstimateCost(ast, &library.CostEstimator{}); err != nil {
				t.Fatal(err)
			}
		}
		if est[0] != est[1] {
			t.Errorf("%s: Base estimate %+v, twin %+v", expr, est[0], est[1])
		}
	}
}
