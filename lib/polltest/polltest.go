// Package polltest waits in a test for a condition that other goroutines
// or processes make true: it polls the condition until it holds, and fails
// the test if it does not within a bound meant to be generous (the bound
// catches a hang; it does not decide what the test asserts).
package polltest

import (
	"testing"
	"time"
)

// interval is how often Until evaluates its condition.
const interval = 5 * time.Millisecond

// Until evaluates cond until it returns true and fails the test (Fatal,
// naming what it waited for) if that takes longer than timeout.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(interval)
	}
}
