package follow

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRun: every ended stream is followed by Lost, failures back off,
// UNIMPLEMENTED waits longest, and Run returns when ctx ends.
func TestRun(t *testing.T) {
	var opens, lost atomic.Int64
	results := []error{errors.New("refused"), errors.New("refused"), nil, status.Error(codes.Unimplemented, "old")}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	var times []time.Time
	go func() {
		defer close(done)
		Run(ctx, Config{
			What: "test",
			Open: func(context.Context) (bool, error) {
				n := opens.Add(1)
				times = append(times, time.Now())
				if int(n) > len(results) {
					cancel()
					return false, ctx.Err()
				}
				err := results[n-1]
				return err == nil, err
			},
			Lost:               func() { lost.Add(1) },
			MinRetry:           10 * time.Millisecond,
			MaxRetry:           40 * time.Millisecond,
			UnimplementedRetry: 200 * time.Millisecond,
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctx ended")
	}
	if opens.Load() != 5 || lost.Load() != 5 {
		t.Fatalf("%d opens, %d losses; want 5 each", opens.Load(), lost.Load())
	}
	// The wait after UNIMPLEMENTED (the last gap) is the longest.
	if last := times[4].Sub(times[3]); last < 200*time.Millisecond {
		t.Fatalf("retried %s after UNIMPLEMENTED, want at least 200ms", last)
	}
}
