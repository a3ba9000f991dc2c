package server

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
)

var _ flowcontrolv1.DecisionServiceServer = (*Server)(nil)

// workerIdle is how long a Decide stream keeps an idle worker.
const workerIdle = 10 * time.Second

// Decide serves the Acquire and ReleaseGrants calls of one stream with
// the unary methods (Acquire, ReleaseGrants), so both paths decide,
// check leadership and map errors alike.
//
// Each Acquire runs in a worker goroutine of its own while it runs, since
// it may wait in its queue; workers are kept (idle for up to
// workerIdle) and reused by later Acquires, so a decision does not pay
// for a new goroutine growing its stack. ReleaseGrants never waits and
// runs in Decide's goroutine. Answers are sent as
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
		// calls counts the Acquires in progress; workers the worker
		// goroutines.
		calls, workers sync.WaitGroup
		jobs           = make(chan func()) // to idle workers
		// callsMu guards calls: the cancel functions of the Acquires in
		// progress, by id.
		callsMu   sync.Mutex
		cancelers = map[uint64]context.CancelFunc{}
	)
	// run runs f in an idle worker, or a new one.
	run := func(f func()) {
		select {
		case jobs <- f:
			return
		default:
		}
		workers.Add(1)
		go func() {
			defer workers.Done()
			idle := time.NewTimer(workerIdle)
			defer idle.Stop()
			for {
				f()
				idle.Reset(workerIdle)
				select {
				case f = <-jobs:
				case <-idle.C:
					return
				case <-ctx.Done():
					return
				}
			}
		}()
	}
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
		cancelAll() // the calls in progress end at once; the workers too
		workers.Wait()
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
			calls.Wait()
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
			cancelers[id] = cancel
			callsMu.Unlock()
			calls.Add(1)
			run(func() {
				defer calls.Done()
				resp, err := s.Acquire(actx, call.Acquire)
				callsMu.Lock()
				delete(cancelers, id)
				callsMu.Unlock()
				cancel()
				out := &flowcontrolv1.DecideResponse{Id: id}
				if err != nil {
					out.Result = errorResult(err)
				} else {
					out.Result = &flowcontrolv1.DecideResponse_Acquire{Acquire: resp}
				}
				send(out)
			})
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
				if cancel := cancelers[id]; cancel != nil {
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
