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
// validation on its 1 KiB ConfigMap twice: as a program of the
// stored-expression environment, whose program options always attach
// cel-go's per-node cost observer (the tracked path), and as a program of
// celenv's untracked twin compiled from the same expression (the path the
// service takes when a policy's worst case fits; see untracked.go). It
// reports the checker's cost estimate (Kubernetes' estimator, no size
// information: the object is schemaless) as est-max, MaxUint64 meaning
// unbounded.
func BenchmarkCostTracking(b *testing.B) {
	env, err := celenv.Base().StoredExpressionsEnv().Extend(cel.Variable("object", cel.DynType))
	if err != nil {
		b.Fatal(err)
	}
	twin, err := celenv.Untracked()
	if err != nil {
		b.Fatal(err)
	}
	twinEnv, err := twin.StoredExpressionsEnv().Extend(cel.Variable("object", cel.DynType))
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
		twinAST, iss := twinEnv.Compile(expr)
		if iss.Err() != nil {
			b.Fatal(iss.Err())
		}
		untracked, err := twinEnv.Program(twinAST)
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
				if v, _, err := untracked.Eval(act); err != nil || v.Value() != true {
					b.Fatal(err, v)
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
