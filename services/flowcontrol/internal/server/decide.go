package server

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
)

var _ flowcontrolv1.DecisionServiceServer = (*Server)(nil)

// Decide serves the Acquire and ReleaseGrants calls of one stream with
// the unary methods (Acquire, ReleaseGrants), so both paths decide,
// check leadership and map errors alike.
//
// Each Acquire runs in its own goroutine, since it may wait in its queue;
// ReleaseGrants never waits and runs in Decide's. Answers are sent as
// calls finish, one Send at a time (sendMu). When the client closes its
// side, the calls in progress are answered before Decide returns; when
// the stream ends otherwise, or the Server closes (UNAVAILABLE), they
// are cancelled: queued requests leave their queues, and a grant made
// meanwhile is released by Acquire's own check of its context.
func (s *Server) Decide(stream grpc.BidiStreamingServer[flowcontrolv1.DecideRequest, flowcontrolv1.DecideResponse]) error {
	ctx, cancelAll := context.WithCancel(stream.Context())
	var (
		sendMu  sync.Mutex
		sendErr error
		wg      sync.WaitGroup
		// callsMu guards calls: the cancel functions of the Acquires in
		// progress, by id.
		callsMu sync.Mutex
		calls   = map[uint64]context.CancelFunc{}
	)
	send := func(resp *flowcontrolv1.DecideResponse) {
		sendMu.Lock()
		defer sendMu.Unlock()
		if sendErr != nil {
			return
		}
		if sendErr = stream.Send(resp); sendErr != nil {
			cancelAll() // nobody would hear the answers
		}
	}
	defer func() {
		cancelAll() // the calls in progress end at once
		wg.Wait()
	}()
	// Recv blocks until a message or the stream's end, so it runs in its
	// own goroutine, which ends with the stream.
	reqs := make(chan *flowcontrolv1.DecideRequest)
	recvErr := make(chan error, 1)
	go func() {
		for {
			req, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		var req *flowcontrolv1.DecideRequest
		select {
		case req = <-reqs:
		case err := <-recvErr:
			if !errors.Is(err, io.EOF) {
				return err
			}
			wg.Wait()
			sendMu.Lock()
			defer sendMu.Unlock()
			return sendErr
		case <-s.closing:
			return status.Error(codes.Unavailable, "flowcontrol: shutting down")
		}
		id := req.GetId()
		switch call := req.GetCall().(type) {
		case *flowcontrolv1.DecideRequest_Acquire:
			actx, cancel := context.WithCancel(ctx)
			callsMu.Lock()
			calls[id] = cancel
			callsMu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := s.Acquire(actx, call.Acquire)
				callsMu.Lock()
				delete(calls, id)
				callsMu.Unlock()
				cancel()
				out := &flowcontrolv1.DecideResponse{Id: id}
				if err != nil {
					out.Result = errorResult(err)
				} else {
					out.Result = &flowcontrolv1.DecideResponse_Acquire{Acquire: resp}
				}
				send(out)
			}()
		case *flowcontrolv1.DecideRequest_ReleaseGrants:
			resp, err := s.ReleaseGrants(ctx, call.ReleaseGrants)
			out := &flowcontrolv1.DecideResponse{Id: id}
			if err != nil {
				out.Result = errorResult(err)
			} else {
				out.Result = &flowcontrolv1.DecideResponse_ReleaseGrants{ReleaseGrants: resp}
			}
			send(out)
		case *flowcontrolv1.DecideRequest_Cancel:
			if call.Cancel {
				callsMu.Lock()
				if cancel := calls[id]; cancel != nil {
					cancel()
				}
				callsMu.Unlock()
			}
		default:
			send(&flowcontrolv1.DecideResponse{Id: id, Result: errorResult(status.Error(codes.InvalidArgument, "a call is required"))})
		}
	}
}

// errorResult carries err's gRPC status, serialized, as a Decide answer.
func errorResult(err error) *flowcontrolv1.DecideResponse_Error {
	b, merr := proto.Marshal(status.Convert(err).Proto())
	if merr != nil {
		b, _ = proto.Marshal(status.New(codes.Internal, err.Error()).Proto())
	}
	return &flowcontrolv1.DecideResponse_Error{Error: b}
}
