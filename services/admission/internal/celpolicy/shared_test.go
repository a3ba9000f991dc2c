package celpolicy

import (
	"encoding/json"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"

	"github.com/meridian-cp/meridian/lib/kube/celenv"
)

// TestSharedValues: expressions over a request's objects give the same
// results (values, or errors with the same message) whether the objects
// are cel-go's maps or the shared values the policies of a request read,
// and again when the shared values are read a second time (their caches
// filled).
func TestSharedValues(t *testing.T) {
	twin, err := celenv.Untracked()
	if err != nil {
		t.Fatal(err)
	}
	env, err := twin.StoredExpressionsEnv().Extend(cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	decode := func(s string) map[string]any {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	const obj = `{"metadata":{"name":"a","labels":{"env":"prod","team":"x"}},"data":{"k1":"v1","k2":"v2"},
		"spec":{"containers":[{"name":"c1","image":"i:1","ports":[{"port":80}]},{"name":"c2","image":"i:2"}],"replicas":3,"ratio":0.5,"on":true,"nil":null}}`
	const old = `{"metadata":{"name":"a","labels":{"env":"prod","team":"x"}},"data":{"k1":"v1","k2":"v2"},
		"spec":{"containers":[{"name":"c1","image":"i:1","ports":[{"port":80}]},{"name":"c2","image":"i:3"}],"replicas":3,"ratio":0.5,"on":true,"nil":null}}`
	exprs := []string{
		"object.metadata.name", "object.metadata.labels", "object.data.all(k, k.startsWith('k'))",
		"object.data.exists(k, object.data[k] == 'v2')", "object.data.all(k, v, v.size() == 2)",
		"object.spec.containers.all(c, c.image.startsWith('i:'))", "object.spec.containers.map(c, c.name)",
		"object.spec.containers.exists(i, c, i == 1 && c.name == 'c2')", "object.spec.containers[0].ports[0].port",
		"object.spec.containers[2]", "object.spec.containers[-1]", "object.spec.containers['x']",
		"object.metadata.missing", "object.data[1]", "has(object.spec.nil)", "object.spec.nil == null",
		"has(object.metadata.annotations)", "object.metadata.?annotations.orValue({})", "object.?spec.?containers[?1].?image",
		"'env' in object.metadata.labels", "'c1' in object.spec.containers.map(c, c.name)",
		"object.spec.containers[0] in object.spec.containers", "object == oldObject", "object.metadata == oldObject.metadata",
		"object.spec.containers == oldObject.spec.containers", "object.spec.containers[0] == oldObject.spec.containers[0]",
		"object.data.size() + object.spec.containers.size()", "object.spec.replicas * 2", "object.spec.ratio", "object.spec.on",
		"object.data.filter(k, k == 'k1')", "object.spec.containers.filter(c, c.name == 'c2')[0].image",
		"type(object.metadata) == map", "type(object.spec.containers) == list", "object.spec.containers + [1]",
		"object.metadata.labels.transformMap(k, v, v + '!')", "object.spec.containers.transformList(i, c, i)",
		"string(object.spec.replicas)", "object.data.k1 + object.metadata.name", "dyn(object.metadata) == {'name': 'a'}",
		"object.spec.containers.sortBy(c, c.name).map(c, c.image)", "object.data.sum()",
	}
	for _, e := range exprs {
		ast, iss := env.Compile(e)
		if iss.Err() != nil {
			t.Fatalf("%s: %v", e, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatalf("%s: %v", e, err)
		}
		eval := func(o, oo ref.Val) (ref.Val, error) {
			v, _, err := prg.Eval(map[string]any{"object": o, "oldObject": oo})
			return v, err
		}
		want, wantErr := eval(types.DefaultTypeAdapter.NativeToValue(decode(obj)), types.DefaultTypeAdapter.NativeToValue(decode(old)))
		o, oo := share(types.DefaultTypeAdapter.NativeToValue(decode(obj))), share(types.DefaultTypeAdapter.NativeToValue(decode(old)))
		if _, ok := o.(*sharedMap); !ok {
			t.Fatalf("share: got %T, want a *sharedMap", o)
		}
		for round := range 2 {
			got, gotErr := eval(o, oo)
			switch {
			case (wantErr == nil) != (gotErr == nil):
				t.Errorf("%s (round %d): error %v, want %v", e, round, gotErr, wantErr)
			case wantErr != nil:
				if gotErr.Error() != wantErr.Error() {
					t.Errorf("%s (round %d): error %q, want %q", e, round, gotErr, wantErr)
				}
			case got.Equal(want) != types.True || want.Equal(got) != types.True || got.Type() != want.Type():
				t.Errorf("%s (round %d): %v (%T), want %v (%T)", e, round, got, got, want, want)
			}
		}
	}
}
