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
// of stack, with and without Grow first: the difference is the doublings
// and copies Grow saves.
func BenchmarkHandler(b *testing.B) {
	for _, grow := range []bool{false, true} {
		name := "plain"
		if grow {
			name = "grow"
		}
		b.Run(name, func(b *testing.B) {
			done := make(chan int)
			for i := 0; i < b.N; i++ {
				go func() {
					if grow {
						Grow()
					}
					done <- deep(100)
				}()
				<-done
			}
		})
	}
}
