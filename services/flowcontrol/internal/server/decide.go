package server

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"
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
// An Acquire that is granted or rejected without waiting in a queue is
// decided in Decide's goroutine and answered with the batch it came in;
// any other runs in a worker goroutine of its own while it runs, since
// it waits in its queue, and so does every Acquire that arrives while
// Acquires of the stream are in workers (its level likely has requests
// queued, so a try would only add work); workers are kept (idle for up to
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
		// The messages already received are decided before the flush, so
		// that their answers decided at once go in one Send.
		s.decideMessage(ctx, req, out, &dc)
	received:
		for range maxCoalesced {
			select {
			case req = <-reqs:
				s.decideMessage(ctx, req, out, &dc)
			default:
				break received
			}
		}
		out.flush()
	}
}

// maxCoalesced bounds the messages a Decide stream decides beyond the
// first before it sends the answers ready.
const maxCoalesced = 16

// decideMessage serves the calls of one message of a Decide stream.
func (s *Server) decideMessage(ctx context.Context, req *flowcontrolv1.DecideRequest, out *answers, dc *decideCalls) {
	if batch := req.GetCalls(); len(batch) > 0 {
		for _, call := range batch {
			s.decideCall(ctx, call, out, dc)
		}
		return
	}
	s.decideCall(ctx, req, out, dc)
}

// decideCalls is the state of a Decide stream's calls in progress.
type decideCalls struct {
	// run runs an Acquire in a worker goroutine.
	run func(func())
	// wg counts the Acquires in progress; inWorkers those of them in
	// workers.
	wg        sync.WaitGroup
	inWorkers atomic.Int32
	// mu guards cancelers: the cancel functions of the Acquires in
	// progress, by id.
	mu        sync.Mutex
	cancelers map[uint64]context.CancelFunc
}

// decideCall serves one call of a Decide stream: an Acquire that can be
// decided without waiting in a queue (apf.Controller.TryAcquire), a
// ReleaseGrants or a cancel at once (an answer queued on out, sent by
// the caller's flush); any other Acquire in a worker (its answer sent
// when it ends). An Acquire decided at once never overtakes a request
// queued in its level; as between workers, there is no order between it
// and an Acquire handed to a worker that has not queued its request yet.
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
		a, resp, err := s.startAcquire(actx, call.Acquire)
		switch {
		case a == nil:
		case dc.inWorkers.Load() > 0:
			// Acquires of this stream wait in workers, so its requests
			// are likely queued: this one goes to a worker without a try,
			// which would most likely fail.
			err = errWouldWait
		default:
			resp, err = a.decide(false)
		}
		if !errors.Is(err, errWouldWait) {
			// Decided without waiting: answered in this batch's flush.
			out.add(acquireAnswer(id, resp, err, span, cancel))
			return
		}
		// The request may wait in its queue: a worker decides it.
		dc.mu.Lock()
		dc.cancelers[id] = cancel
		dc.mu.Unlock()
		dc.wg.Add(1)
		dc.inWorkers.Add(1)
		dc.run(func() {
			defer dc.wg.Done()
			resp, err := a.decide(true)
			dc.inWorkers.Add(-1)
			dc.mu.Lock()
			delete(dc.cancelers, id)
			dc.mu.Unlock()
			out.send(acquireAnswer(id, resp, err, span, cancel))
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

// acquireAnswer ends an Acquire of a Decide stream: it ends the call's
// span and context (cancel) and returns its answer.
func acquireAnswer(id uint64, resp *flowcontrolv1.AcquireResponse, err error, span trace.Span, cancel context.CancelFunc) *flowcontrolv1.DecideResponse {
	if err != nil {
		span.SetStatus(otelcodes.Error, err.Error())
	}
	span.End()
	cancel()
	answer := &flowcontrolv1.DecideResponse{Id: id}
	if err != nil {
		answer.Result = errorResult(err)
	} else {
		answer.Result = &flowcontrolv1.DecideResponse_Acquire{Acquire: resp}
	}
	return answer
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
