package celenv

import (
	"testing"

	"github.com/google/cel-go/cel"
)

// eval compiles expr in the new-expressions environment extended with a
// map-typed `object` and evaluates it against obj.
func eval(t *testing.T, expr string, obj map[string]any) (any, error) {
	t.Helper()
	set, err := Extend(cel.Variable("object", cel.DynType))
	if err != nil {
		t.Fatalf("Extend: %v", err)
	}
	env := set.NewExpressionsEnv()
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	prg, err := env.Program(ast, cel.CostLimit(PerCallLimit))
	if err != nil {
		return nil, err
	}
	out, _, err := prg.Eval(map[string]any{"object": obj})
	if err != nil {
		return nil, err
	}
	return out.Value(), nil
}

// TestLibraries runs an example of each Kubernetes CEL library, taken from
// the Kubernetes CEL documentation, through the one environment.
func TestLibraries(t *testing.T) {
	obj := map[string]any{
		"metadata": map[string]any{"name": "web-1", "labels": map[string]any{"env": "prod"}},
		"spec":     map[string]any{"replicas": int64(3), "items": []any{int64(1), int64(2), int64(3)}},
	}
	for _, tc := range []struct {
		library, expr string
		want          any
	}{
		{"core", "object.spec.replicas <= 5", true},
		{"macros", "object.spec.items.all(i, i > 0)", true},
		{"lists", "object.spec.items.isSorted()", true},
		{"lists", "[1, 2, 3].sum() == 6", true},
		{"lists", "[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3", true},
		{"lists", "[1, 2, 2, 3].indexOf(2) == 1 && [1, 2, 2, 3].lastIndexOf(2) == 2", true},
		{"sets", "sets.contains([1, 2, 3], [2, 3])", true},
		{"regex", "'abc 123'.find('[0-9]+') == '123'", true},
		{"regex", "'123 abc 456'.findAll('[0-9]+') == ['123', '456']", true},
		{"strings", "'a,b'.split(',') == ['a', 'b'] && 'Hello'.lowerAscii() == 'hello'", true},
		{"strings", "object.metadata.name.startsWith('web-')", true},
		{"urls", "url('https://example.com:80/path').getHost() == 'example.com:80'", true},
		{"urls", "isURL('https://example.com/') && !isURL('not a url')", true},
		{"quantity", "quantity('1Gi').isGreaterThan(quantity('100Mi'))", true},
		{"quantity", "quantity('500m').add(quantity('500m')).compareTo(quantity('1')) == 0", true},
		{"ip", "ip('10.0.0.1').family() == 4 && isIP('fe80::1')", true},
		{"cidr", "cidr('10.0.0.0/8').containsIP(ip('10.1.2.3'))", true},
		{"cidr", "cidr('192.168.0.0/24').prefixLength() == 24", true},
		{"semver", "semver('1.2.3').isLessThan(semver('1.10.0'))", true},
		{"semver", "isSemver('v1.0.0', true) && !isSemver('v1.0.0')", true},
		{"format", "format.dns1123Label().validate('web-1').hasValue() == false", true},
		{"format", "format.dns1123Label().validate('Web_1').hasValue()", true},
		{"optional", "object.metadata.?annotations.orValue({}).size() == 0", true},
		{"optional", "object.metadata.labels[?'env'].orValue('') == 'prod'", true},
		{"two-var comprehensions", "object.metadata.labels.all(k, v, k != '' && v != '')", true},
		{"timestamps", "timestamp('2026-01-01T00:00:00Z') < timestamp('2026-06-01T00:00:00Z')", true},
		{"durations", "duration('1h') > duration('59m')", true},
	} {
		t.Run(tc.library+"/"+tc.expr, func(t *testing.T) {
			got, err := eval(t, tc.expr, obj)
			if err != nil {
				t.Fatalf("%s: %v", tc.expr, err)
			}
			if got != tc.want {
				t.Fatalf("%s = %v, want %v", tc.expr, got, tc.want)
			}
		})
	}
}

// TestRejects checks expressions the environment refuses: unknown
// functions, type errors, and an evaluation over the per-call cost limit.
func TestRejects(t *testing.T) {
	for _, expr := range []string{
		"object.spec.replicas.unknownFunction()",
		"1 + 'a'",
		"quantity('not a quantity') == quantity('1')",
		"[1, 2, 3].map(x, [1,2,3,4,5,6,7,8,9,10].map(y, [1,2,3,4,5,6,7,8,9,10].map(z, [1,2,3,4,5,6,7,8,9,10].map(w, string(w) + string(z) + string(y))))).size() > 0 && " +
			"[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, string(a+b+c+d+e+f).size() > 0))))))",
	} {
		if got, err := eval(t, expr, map[string]any{}); err == nil {
			t.Errorf("%s = %v, want an error", expr, got)
		}
	}
}

// TestStoredEnvironmentAcceptsNew: every expression the new-expressions
// environment compiles also compiles in the stored one, so what was
// written can always be read back.
func TestStoredEnvironmentAcceptsNew(t *testing.T) {
	set := Base()
	for _, expr := range []string{"[1].isSorted()", "cidr('10.0.0.0/8').prefixLength() == 8", "semver('1.0.0').major() == 1"} {
		if _, iss := set.NewExpressionsEnv().Compile(expr); iss.Err() != nil {
			t.Fatalf("new %s: %v", expr, iss.Err())
		}
		if _, iss := set.StoredExpressionsEnv().Compile(expr); iss.Err() != nil {
			t.Fatalf("stored %s: %v", expr, iss.Err())
		}
	}
}
