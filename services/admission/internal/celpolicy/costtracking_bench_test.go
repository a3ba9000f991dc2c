package celpolicy

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/interpreter"
	"k8s.io/apiserver/pkg/cel/library"

	"github.com/meridian-cp/meridian/lib/kube/celenv"
)

// BenchmarkCostTracking evaluates the loadtest policy's three kinds of
// validation on its 1 KiB ConfigMap twice: as the service does (a program
// of the stored-expression environment, whose program options always
// attach cel-go's per-node cost observer), and as an interpretable planned
// without that observer from the same checked AST and function bindings.
// It reports the checker's cost estimate (Kubernetes' estimator, no size
// information: the object is schemaless) as est-max, MaxUint64 meaning
// unbounded. The untracked interpretable lacks the libraries' own program
// options (for example the optional library's or/orValue decorator), so
// it is a measure of the observer's share, not an evaluator the service
// could use.
func BenchmarkCostTracking(b *testing.B) {
	env, err := celenv.Base().StoredExpressionsEnv().Extend(cel.Variable("object", cel.DynType))
	if err != nil {
		b.Fatal(err)
	}
	var sb strings.Builder
	sb.WriteString(`{"metadata":{"name":"load","labels":{"app":"load"}},"data":{`)
	for i := range 9 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `"key-%d":"%s"`, i, strings.Repeat("v", 90))
	}
	sb.WriteString("}}")
	var obj map[string]any
	if err := json.Unmarshal([]byte(sb.String()), &obj); err != nil {
		b.Fatal(err)
	}
	act, err := interpreter.NewActivation(map[string]any{"object": obj})
	if err != nil {
		b.Fatal(err)
	}
	disp := interpreter.NewDispatcher()
	for _, fn := range env.Functions() {
		bs, err := fn.Bindings()
		if err != nil {
			b.Fatal(err)
		}
		if err := disp.Add(bs...); err != nil {
			b.Fatal(err)
		}
	}
	attrs := interpreter.NewAttributeFactory(env.Container, env.CELTypeAdapter(), env.CELTypeProvider())
	interp := interpreter.NewInterpreter(disp, env.Container, env.CELTypeProvider(), env.CELTypeAdapter(), attrs)
	for i, expr := range []string{"object.metadata.name.size() < 64", "!('forbidden' in object.metadata.labels)", "object.data.all(k, k.size() < 256)"} {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			b.Fatal(iss.Err())
		}
		est, err := env.EstimateCost(ast, &library.CostEstimator{SizeEstimator: noSizes{}})
		if err != nil {
			b.Fatal(err)
		}
		tracked, err := env.Program(ast)
		if err != nil {
			b.Fatal(err)
		}
		untracked, err := interp.NewInterpretable(ast.NativeRep(), interpreter.Optimize())
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprint("tracked/", i), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if v, _, err := tracked.Eval(act); err != nil || v.Value() != true {
					b.Fatal(err, v)
				}
			}
			b.ReportMetric(float64(est.Max), "est-max")
		})
		b.Run(fmt.Sprint("untracked/", i), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if v := untracked.Eval(act); v.Value() != true {
					b.Fatal(v)
				}
			}
		})
	}
}

// noSizes is a size estimator that knows no sizes, as for a schemaless
// object.
type noSizes struct{}

func (noSizes) EstimateSize(checker.AstNode) *checker.SizeEstimate { return nil }

func (noSizes) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}
