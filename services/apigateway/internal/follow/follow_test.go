package follow

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
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

// script is a client stream that returns its messages, then err.
type script struct {
	grpc.ClientStream
	msgs []string
	err  error
}

func (s *script) Recv() (*string, error) {
	if len(s.msgs) == 0 {
		return nil, s.err
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return &m, nil
}

// TestReceive: every message is applied in order, only the first as the
// first; the stream's end is returned with whether a message arrived,
// and the stream's context ends with Receive.
func TestReceive(t *testing.T) {
	ended := errors.New("ended")
	for _, tc := range []struct {
		name        string
		msgs        []string
		openErr     error
		established bool
		err         error
	}{
		{name: "messages", msgs: []string{"a", "b", "c"}, established: true, err: ended},
		{name: "no message", err: ended},
		{name: "open fails", openErr: errors.New("refused"), err: errors.New("refused")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var streamCtx context.Context
			open := func(ctx context.Context) (grpc.ServerStreamingClient[string], error) {
				streamCtx = ctx
				if tc.openErr != nil {
					return nil, tc.openErr
				}
				return &script{msgs: slices.Clone(tc.msgs), err: ended}, nil
			}
			var got []string
			established, err := Receive(t.Context(), open, func(m *string, first bool) {
				if first != (len(got) == 0) {
					t.Errorf("message %q: first = %v", *m, first)
				}
				got = append(got, *m)
			})
			if established != tc.established || err == nil || err.Error() != tc.err.Error() {
				t.Fatalf("Receive = %v, %v; want %v, %v", established, err, tc.established, tc.err)
			}
			if !slices.Equal(got, tc.msgs) {
				t.Fatalf("applied %q, want %q", got, tc.msgs)
			}
			if streamCtx.Err() == nil {
				t.Fatal("the stream's context is still live after Receive returned")
			}
		})
	}
}
