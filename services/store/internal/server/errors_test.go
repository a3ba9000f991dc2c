package server

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/disk"
	"github.com/meridian-cp/meridian/services/store/internal/fsm"
	"github.com/meridian-cp/meridian/services/store/internal/mvcc"
	"github.com/meridian-cp/meridian/services/store/internal/raftnode"
)

func TestToStatus(t *testing.T) {
	cases := []struct {
		err  error
		code codes.Code
	}{
		{fmt.Errorf("wrapped: %w", &mvcc.CompactedError{CompactRev: 7, Requested: 3}), codes.OutOfRange},
		{&mvcc.FutureRevError{CurrentRev: 7, Requested: 9}, codes.FailedPrecondition},
		{mvcc.ErrEmptyKey, codes.InvalidArgument},
		{fmt.Errorf("%w: 2 MiB", mvcc.ErrValueTooLarge), codes.InvalidArgument},
		{mvcc.ErrLeaseNotFound, codes.NotFound},
		{fmt.Errorf("x: %w", raftnode.ErrNotLeader), codes.Unavailable},
		{raftnode.ErrStopped, codes.Unavailable},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
		{fmt.Errorf("disk on fire"), codes.Internal},
		{fmt.Errorf("raftstable: commit: %w", &os.PathError{Op: "write", Path: "000001.log", Err: syscall.ENOSPC}), codes.ResourceExhausted},
		{fmt.Errorf("%w: %w", fsm.ErrFailed, syscall.ENOSPC), codes.ResourceExhausted},
		{fmt.Errorf("%w: %w", fmt.Errorf("%w: 1 MiB available", disk.ErrNoSpace), raftnode.ErrNotProposed), codes.ResourceExhausted},
	}
	for _, c := range cases {
		st, _ := status.FromError(toStatus(c.err))
		if st.Code() != c.code {
			t.Errorf("%v → %v, want %v", c.err, st.Code(), c.code)
		}
	}
	st, _ := status.FromError(toStatus(&mvcc.CompactedError{CompactRev: 7, Requested: 3}))
	if d, ok := st.Details()[0].(*storev1.CompactedError); !ok || d.CompactRevision != 7 || d.RequestedRevision != 3 {
		t.Fatalf("compacted detail %v", st.Details())
	}
	st, _ = status.FromError(toStatus(&mvcc.FutureRevError{CurrentRev: 7, Requested: 9}))
	if d, ok := st.Details()[0].(*storev1.FutureRevisionError); !ok || d.CurrentRevision != 7 || d.RequestedRevision != 9 {
		t.Fatalf("future detail %v", st.Details())
	}
	st, _ = status.FromError(toStatus(fmt.Errorf("%w: %w", disk.ErrNoSpace, raftnode.ErrNotProposed)))
	if len(st.Details()) != 1 {
		t.Fatalf("no-space details %v, want the NOT_PROPOSED ErrorInfo", st.Details())
	}
	if toStatus(nil) != nil {
		t.Fatal("nil error mapped to a status")
	}
}
