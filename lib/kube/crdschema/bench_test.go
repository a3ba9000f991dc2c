package crdschema

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// processCPU is the process's user+system CPU time in nanoseconds.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// benchObject is testdata/bench-object.json decoded as the gateway
// decodes a request body.
func benchObject(b testing.TB) *unstructured.Unstructured {
	b.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "bench-object.json"))
	if err != nil {
		b.Fatal(err)
	}
	decoded := map[string]any{}
	if err := utiljson.Unmarshal(data, &decoded); err != nil {
		b.Fatal(err)
	}
	return &unstructured.Unstructured{Object: decoded}
}

// BenchmarkAdmit admits a custom resource with 20 spec fields and 3 CEL
// rules (testdata/bench.yaml, testdata/bench-object.json), as on create
// and as on update (with the stored object as oldSelf); the object is
// decoded outside the timer. Figures are in docs/benchmarks.md.
func BenchmarkAdmit(b *testing.B) {
	s := compile(b, "bench.yaml", "v1")
	proto := benchObject(b)
	old := proto.DeepCopy()
	old.SetResourceVersion("1")
	if _, errs := s.Admit(context.Background(), old, nil, FieldValidationStrict); len(errs) > 0 {
		b.Fatal(errs)
	}
	for _, bc := range []struct {
		name string
		old  *unstructured.Unstructured
	}{{"create", nil}, {"update", old}} {
		b.Run(bc.name, func(b *testing.B) {
			objs := make([]*unstructured.Unstructured, b.N)
			for i := range objs {
				objs[i] = proto.DeepCopy()
				objs[i].SetResourceVersion("1")
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU(b)
			for i := range b.N {
				if _, errs := s.Admit(context.Background(), objs[i], bc.old, FieldValidationStrict); len(errs) > 0 {
					b.Fatal(errs)
				}
			}
			// CPU time per admission (GC included), which a shared
			// machine distorts far less than wall time.
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkDefaultOnRead prepares the stored 20-field object for a read
// (prune, metadata repair, defaults), as every GET and every item of a
// LIST of a custom resource does.
func BenchmarkDefaultOnRead(b *testing.B) {
	s := compile(b, "bench.yaml", "v1")
	proto := benchObject(b)
	objs := make([]*unstructured.Unstructured, b.N)
	for i := range objs {
		objs[i] = proto.DeepCopy()
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := processCPU(b)
	for i := range b.N {
		s.DefaultOnRead(objs[i])
	}
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}
