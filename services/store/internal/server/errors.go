package server

import (
	"context"
	"errors"
	"syscall"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	storev1 "github.com/meridian-cp/meridian/proto/gen/meridian/store/v1"
	"github.com/meridian-cp/meridian/services/store/internal/disk"
	"github.com/meridian-cp/meridian/services/store/internal/fsm"
	"github.com/meridian-cp/meridian/services/store/internal/mvcc"
	"github.com/meridian-cp/meridian/services/store/internal/raftnode"
	"github.com/meridian-cp/meridian/services/store/internal/watch"
	"github.com/meridian-cp/meridian/services/store/internal/wire"
)

// codeTable maps package sentinels to gRPC codes; the first match (by
// errors.Is, so wrapped errors map too) wins. This is the only place errors
// become statuses.
var codeTable = []struct {
	err  error
	code codes.Code
}{
	{mvcc.ErrCompacted, codes.OutOfRange},         // + storev1.CompactedError detail
	{mvcc.ErrFutureRev, codes.FailedPrecondition}, // + storev1.FutureRevisionError detail
	{mvcc.ErrInvalidArgument, codes.InvalidArgument},
	{fsm.ErrBadCommand, codes.InvalidArgument},
	{mvcc.ErrLeaseNotFound, codes.NotFound},
	{mvcc.ErrLeaseExists, codes.AlreadyExists},
	{raftnode.ErrNoSuchMember, codes.NotFound},
	// Disk (nearly) full: refused before proposing (it also wraps
	// raftnode.ErrNotProposed, which adds the NOT_PROPOSED detail).
	{disk.ErrNoSpace, codes.ResourceExhausted},
	{raftnode.ErrNotLeader, codes.Unavailable},
	{ErrNoLeader, codes.Unavailable},
	{raftnode.ErrStopped, codes.Unavailable},
	{raftnode.ErrTimeout, codes.Unavailable},
	{watch.ErrClosed, codes.Unavailable},
	// Defensive: the raft log and state batches never return ENOSPC
	// (pebble treats a failed WAL write as fatal, and raft's LogCache
	// flattens StoreLogs errors with %q; see package disk).
	{syscall.ENOSPC, codes.ResourceExhausted},
	{fsm.ErrFailed, codes.Internal},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
	{context.Canceled, codes.Canceled},
}

// toStatus converts an error of the store packages into a gRPC status
// error. Errors not in the table become INTERNAL.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := codes.Internal
	for _, e := range codeTable {
		if errors.Is(err, e.err) {
			code = e.code
			break
		}
	}
	st := status.New(code, err.Error())
	var detail protoadapt.MessageV1
	var ce *mvcc.CompactedError
	var fe *mvcc.FutureRevError
	switch {
	case errors.As(err, &ce):
		detail = protoadapt.MessageV1Of(&storev1.CompactedError{CompactRevision: ce.CompactRev, RequestedRevision: ce.Requested})
	case errors.As(err, &fe):
		detail = protoadapt.MessageV1Of(&storev1.FutureRevisionError{CurrentRevision: fe.CurrentRev, RequestedRevision: fe.Requested})
	}
	if detail == nil && errors.Is(err, raftnode.ErrNotProposed) {
		detail = protoadapt.MessageV1Of(&errdetails.ErrorInfo{Domain: wire.ErrorDomain, Reason: wire.ReasonNotProposed})
	}
	if detail != nil {
		if withDetail, derr := st.WithDetails(detail); derr == nil {
			st = withDetail
		}
	}
	return st.Err()
}
