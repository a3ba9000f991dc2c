package storage

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestWriteErrorsSayWhetherTheyMayHaveApplied: a write that failed on a
// connection the store never accepted was not proposed; one whose member
// went away while it was in flight, or did not answer in time, may have
// been committed. Reads never carry the mark.
func TestWriteErrorsSayWhetherTheyMayHaveApplied(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		may  bool
	}{
		{"dial refused", status.Error(codes.Unavailable, `connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.1:2479: connect: connection refused"`), false},
		{"member went away", status.Error(codes.Unavailable, "error reading from server: EOF"), true},
		{"no answer in time", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ue *UnreachableError
			if !errors.As(convertWrite(tc.err), &ue) {
				t.Fatalf("convertWrite(%v) is no UnreachableError", tc.err)
			}
			if ue.MayHaveApplied != tc.may {
				t.Errorf("MayHaveApplied = %v, want %v", ue.MayHaveApplied, tc.may)
			}
			if !errors.As(convert(tc.err, 0), &ue) || ue.MayHaveApplied {
				t.Errorf("a read's error says it may have applied")
			}
		})
	}
}
