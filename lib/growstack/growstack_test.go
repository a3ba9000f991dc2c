package growstack

import "testing"

// deep recurses n frames of ~256 bytes each, as a handler's call chain does.
//
//go:noinline
func deep(n int) int {
	var pad [32]int64
	pad[n%32] = int64(n)
	if n == 0 {
		return int(pad[0])
	}
	return deep(n-1) + int(pad[n%32])
}

// BenchmarkHandler runs a fresh goroutine per operation that reaches ~25 KiB
// of stack, plain, after Grow (16 KiB: one doubling left) and after
// GrowLarge (32 KiB: none): the differences are the doublings and copies
// they save.
func BenchmarkHandler(b *testing.B) {
	for _, grow := range []struct {
		name string
		f    func()
	}{{"plain", func() {}}, {"grow", Grow}, {"growlarge", GrowLarge}} {
		b.Run(grow.name, func(b *testing.B) {
			done := make(chan int)
			for i := 0; i < b.N; i++ {
				go func() {
					grow.f()
					done <- deep(100)
				}()
				<-done
			}
		})
	}
}
