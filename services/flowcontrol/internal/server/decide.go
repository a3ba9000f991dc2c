package server

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"time"

	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-cp/meridian/lib/flowcontrol/decideclient"
	"github.com/meridian-cp/meridian/lib/telemetry"
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
// calls finish (answers: what is ready goes in one message when the
// client opened the stream with decideclient.BatchMetadata; the server
// says the same in its header, sent at once). When the client closes its
// side, the calls in progress are answered before Decide returns; when
// the stream ends otherwise, or the Server closes (UNAVAILABLE), they
// are cancelled: queued requests leave their queues, and a grant made
// meanwhile is released by Acquire's own check of its context.
func (s *Server) Decide(stream grpc.BidiStreamingServer[flowcontrolv1.DecideRequest, flowcontrolv1.DecideResponse]) error {
	ctx, cancelAll := context.WithCancel(stream.Context())
	md, _ := metadata.FromIncomingContext(ctx)
	out := &answers{stream: stream, batch: slices.Contains(md.Get(decideclient.BatchMetadata), "1"), failed: cancelAll}
	if err := stream.SendHeader(metadata.Pairs(decideclient.BatchMetadata, "1")); err != nil {
		cancelAll()
		return err
	}
	var (
		workers sync.WaitGroup      // the worker goroutines
		jobs    = make(chan func()) // to idle workers
		dc      = decideCalls{cancelers: map[uint64]context.CancelFunc{}}
	)
	// run runs f in an idle worker, or a new one.
	dc.run = func(f func()) {
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
			dc.wg.Wait()
			return out.Err()
		case <-s.closing:
			return status.Error(codes.Unavailable, "flowcontrol: shutting down")
		}
		if batch := req.GetCalls(); len(batch) > 0 {
			for _, call := range batch {
				s.decideCall(ctx, call, out, &dc)
			}
		} else {
			s.decideCall(ctx, req, out, &dc)
		}
		out.flush()
	}
}

// decideCalls is the state of a Decide stream's calls in progress.
type decideCalls struct {
	// run runs an Acquire in a worker goroutine.
	run func(func())
	// wg counts the Acquires in progress.
	wg sync.WaitGroup
	// mu guards cancelers: the cancel functions of the Acquires in
	// progress, by id.
	mu        sync.Mutex
	cancelers map[uint64]context.CancelFunc
}

// decideCall serves one call of a Decide stream: an Acquire in a worker
// (its answer sent when it ends), a ReleaseGrants or a cancel at once (an
// answer queued on out, sent by the caller's flush).
func (s *Server) decideCall(ctx context.Context, req *flowcontrolv1.DecideRequest, out *answers, dc *decideCalls) {
	id := req.GetId()
	switch call := req.GetCall().(type) {
	case *flowcontrolv1.DecideRequest_Acquire:
		actx, cancel := context.WithCancel(ctx)
		var span trace.Span = noSpan
		if tp := req.GetTraceparent(); tp != "" && s.tracer != nil {
			// The call's span, under the caller's, as the gRPC server's
			// interceptor makes for a unary Acquire: Acquire's own
			// flowcontrol.wait span goes under it.
			actx, span = telemetry.StartRemoteSpan(actx, s.tracer, tp, telemetry.ScopeFlowControl, decideAcquireSpan, trace.WithSpanKind(trace.SpanKindServer))
		}
		dc.mu.Lock()
		dc.cancelers[id] = cancel
		dc.mu.Unlock()
		dc.wg.Add(1)
		dc.run(func() {
			defer dc.wg.Done()
			resp, err := s.Acquire(actx, call.Acquire)
			if err != nil {
				span.SetStatus(otelcodes.Error, err.Error())
			}
			span.End()
			dc.mu.Lock()
			delete(dc.cancelers, id)
			dc.mu.Unlock()
			cancel()
			answer := &flowcontrolv1.DecideResponse{Id: id}
			if err != nil {
				answer.Result = errorResult(err)
			} else {
				answer.Result = &flowcontrolv1.DecideResponse_Acquire{Acquire: resp}
			}
			out.send(answer)
		})
	case *flowcontrolv1.DecideRequest_ReleaseGrants:
		resp, err := s.ReleaseGrants(ctx, call.ReleaseGrants)
		answer := &flowcontrolv1.DecideResponse{Id: id}
		if err != nil {
			answer.Result = errorResult(err)
		} else {
			answer.Result = &flowcontrolv1.DecideResponse_ReleaseGrants{ReleaseGrants: resp}
		}
		out.add(answer)
	case *flowcontrolv1.DecideRequest_Cancel:
		if call.Cancel {
			dc.mu.Lock()
			if cancel := dc.cancelers[id]; cancel != nil {
				cancel()
			}
			dc.mu.Unlock()
		}
	default:
		out.add(&flowcontrolv1.DecideResponse{Id: id, Result: errorResult(status.Error(codes.InvalidArgument, "a call is required"))})
	}
}

// decideAcquireSpan names the span of an Acquire made on a Decide stream.
const decideAcquireSpan = "meridian.flowcontrol.v1.DecisionService/Decide.Acquire"

// noSpan is the span of an Acquire whose caller is not traced.
var noSpan = trace.SpanFromContext(context.Background())

// errorResult carries err's gRPC status, serialized, as a Decide answer.
func errorResult(err error) *flowcontrolv1.DecideResponse_Error {
	b, merr := proto.Marshal(status.Convert(err).Proto())
	if merr != nil {
		b, _ = proto.Marshal(status.New(codes.Internal, err.Error()).Proto())
	}
	return &flowcontrolv1.DecideResponse_Error{Error: b}
}
