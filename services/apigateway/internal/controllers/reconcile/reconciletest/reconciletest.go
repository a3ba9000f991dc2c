// Package reconciletest runs the gateway's controllers in tests.
package reconciletest

import (
	"context"
	"testing"
)

// Run calls run (a controller's Run) on its own goroutine until t ends;
// then run's context is cancelled and Run's cleanup waits for run to
// return, so that no controller outlives the store of its test.
func Run(t testing.TB, run func(ctx context.Context)) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}
