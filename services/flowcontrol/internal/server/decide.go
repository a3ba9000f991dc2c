package server

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"

	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meridian-cp/meridian/lib/flowcontrol/apf"
	"github.com/meridian-cp/meridian/lib/flowcontrol/decideclient"
	"github.com/meridian-cp/meridian/lib/telemetry"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
)

var _ flowcontrolv1.DecisionServiceServer = (*Server)(nil)

// Decide serves the Acquire and ReleaseGrants calls of one stream with
// the unary methods' code (Acquire's checks and answer, ReleaseGrants),
// so both paths decide, check leadership and map errors alike.
//
// Every call is decided in Decide's goroutine, which alone sends the
// answers (answers): an Acquire granted or rejected at once, a
// ReleaseGrants and a cancel are answered in the flush that follows the
// messages received together. An Acquire whose request waits in its
// queue has no goroutine: apf.Controller.AcquireFunc calls back when it
// is decided, from the goroutine that decides it (often this one, a
// ReleaseGrants of this stream dispatching it; else another stream's
// Decide, or the request's timer or context), which posts the answer;
// this goroutine sends it with its next flush, woken for it when idle.
// The answers go in one message when the client opened the stream with
// decideclient.BatchMetadata (the server says the same in its header,
// sent at once). When the client closes its side, the calls in progress
// are answered before Decide returns; when the stream ends otherwise,
// or the Server closes (UNAVAILABLE), they are cancelled: queued
// requests leave their queues, and a grant made meanwhile is released
// by AcquireFunc's own check of its context.
func (s *Server) Decide(stream grpc.BidiStreamingServer[flowcontrolv1.DecideRequest, flowcontrolv1.DecideResponse]) error {
	ctx, cancelAll := context.WithCancel(stream.Context())
	defer cancelAll() // the calls in progress end at once
	md, _ := metadata.FromIncomingContext(ctx)
	out := newAnswers(stream, slices.Contains(md.Get(decideclient.BatchMetadata), "1"), cancelAll, s.recycle)
	if err := stream.SendHeader(metadata.Pairs(decideclient.BatchMetadata, "1")); err != nil {
		return err
	}
	dc := decideCalls{queued: map[uint64]apf.Queued{}, finished: map[uint64]struct{}{}}
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
		case <-out.posted:
			out.begin()
			out.flush()
			continue
		case err := <-recvErr:
			if !errors.Is(err, io.EOF) {
				return err
			}
			return s.finishCalls(out, &dc)
		case <-s.closing:
			return status.Error(codes.Unavailable, "flowcontrol: shutting down")
		}
		// The messages already received are decided before the flush, so
		// that their answers decided at once go in one Send.
		out.begin()
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

// finishCalls sends the answers of a Decide stream's calls in progress
// as they are decided, once the client has closed its side, and returns
// when all are sent, or at once with UNAVAILABLE when the Server closes.
func (s *Server) finishCalls(out *answers, dc *decideCalls) error {
	all := make(chan struct{})
	go func() { dc.wg.Wait(); close(all) }()
	for {
		select {
		case <-out.posted:
			out.begin()
			out.flush()
		case <-all:
			out.flush()
			return out.Err()
		case <-s.closing:
			return status.Error(codes.Unavailable, "flowcontrol: shutting down")
		}
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

// decideCalls is the state of a Decide stream's Acquires waiting in
// their queues.
type decideCalls struct {
	// wg counts them.
	wg sync.WaitGroup
	// mu guards queued, their requests by id (for cancels), and
	// finished, the ids of those answered before they were registered:
	// a call's answer (forget) may come, from another goroutine, before
	// AcquireFunc has returned its Queued (register); whichever of the
	// two comes second cleans up.
	mu       sync.Mutex
	queued   map[uint64]apf.Queued
	finished map[uint64]struct{}
}

// register records the queued request of call id, unless it was
// answered already.
func (dc *decideCalls) register(id uint64, q apf.Queued) {
	dc.mu.Lock()
	if _, ok := dc.finished[id]; ok {
		delete(dc.finished, id)
	} else {
		dc.queued[id] = q
	}
	dc.mu.Unlock()
}

// forget ends the call id once it left its queue.
func (dc *decideCalls) forget(id uint64) {
	dc.mu.Lock()
	if _, ok := dc.queued[id]; ok {
		delete(dc.queued, id)
	} else {
		dc.finished[id] = struct{}{}
	}
	dc.mu.Unlock()
	dc.wg.Done()
}

// decideCall serves one call of a Decide stream, in its Decide
// goroutine: an Acquire (answered by the flush that follows when it is
// decided at once, else once it leaves its queue), a ReleaseGrants or a
// cancel.
func (s *Server) decideCall(ctx context.Context, req *flowcontrolv1.DecideRequest, out *answers, dc *decideCalls) {
	id := req.GetId()
	switch call := req.GetCall().(type) {
	case *flowcontrolv1.DecideRequest_Acquire:
		// The stream's context, not one per call: the stream's end
		// cancels every call, and a cancel message takes its one call out
		// of its queue (apf.Queued.Cancel).
		actx := ctx
		var span trace.Span = noSpan
		if tp := req.GetTraceparent(); tp != "" && s.tracer != nil {
			// The call's span, under the caller's, as the gRPC server's
			// interceptor makes for a unary Acquire: Acquire's own
			// flowcontrol.wait span goes under it.
			actx, span = telemetry.StartRemoteSpan(actx, s.tracer, tp, telemetry.ScopeFlowControl, decideAcquireSpan, trace.WithSpanKind(trace.SpanKindServer))
		}
		da := s.newDecideAcquire()
		da.id, da.callSpan, da.out, da.dc = id, span, out, dc
		if err := s.startAcquire(actx, call.Acquire, &da.acquireCall); err != nil {
			out.add(da.result(nil, err), da)
			return
		}
		// Counted before the request can be queued, since its answer
		// may come from another goroutine before AcquireFunc returns.
		dc.wg.Add(1)
		g, q, err := s.ctrl.AcquireFunc(da.ctx, da.gw, da.digest, da.decidedFunc)
		if q.Waiting() {
			dc.register(id, q)
			return
		}
		dc.wg.Done()
		resp, err := da.answer(g, err, &da.reply)
		out.add(da.result(resp, err), da)
	case *flowcontrolv1.DecideRequest_ReleaseGrants:
		resp, err := s.ReleaseGrants(ctx, call.ReleaseGrants)
		answer := &flowcontrolv1.DecideResponse{Id: id}
		if err != nil {
			answer.Result = errorResult(err)
		} else {
			answer.Result = &flowcontrolv1.DecideResponse_ReleaseGrants{ReleaseGrants: resp}
		}
		out.add(answer, nil)
	case *flowcontrolv1.DecideRequest_Cancel:
		if call.Cancel {
			dc.mu.Lock()
			q := dc.queued[id]
			dc.mu.Unlock()
			q.Cancel() // its done, if it runs now, takes dc.mu
		}
	default:
		out.add(&flowcontrolv1.DecideResponse{Id: id, Result: errorResult(status.Error(codes.InvalidArgument, "a call is required"))}, nil)
	}
}

// decideAcquire is an Acquire of a Decide stream: the call, the
// messages of its answer and what AcquireFunc's callback needs, in one
// allocation, which the stream's answers give back to the Server
// (recycle) once the answer is sent.
type decideAcquire struct {
	acquireCall
	reply acquireReply
	id    uint64
	// callSpan is the span of the call (its caller's child), noSpan
	// when its caller is not traced.
	callSpan trace.Span
	out      *answers
	dc       *decideCalls
	// decidedFunc is decided as a func value, made once per
	// decideAcquire and kept across its reuses.
	decidedFunc func(apf.Grant, error)
}

// newDecideAcquire returns a zeroed decideAcquire, a recycled one if
// there is one.
func (s *Server) newDecideAcquire() *decideAcquire {
	da, _ := s.acquires.Get().(*decideAcquire)
	if da == nil {
		da = &decideAcquire{}
		da.decidedFunc = da.decided
		return da
	}
	f := da.decidedFunc
	*da = decideAcquire{decidedFunc: f}
	return da
}

// recycle gives da back once its answer is sent: nothing refers to it
// any more.
func (s *Server) recycle(da *decideAcquire) { s.acquires.Put(da) }

// decided is AcquireFunc's callback for a request that waited in its
// queue: it posts the answer, from the goroutine that decided it. The
// answer's flush may recycle da as soon as it is posted, so what is
// needed afterwards is read first.
func (da *decideAcquire) decided(g apf.Grant, err error) {
	id, dc := da.id, da.dc
	resp, err := da.answer(g, err, &da.reply)
	da.out.post(da.result(resp, err), da)
	dc.forget(id)
}

// result ends the call's span and returns its answer, made in da.reply.
func (da *decideAcquire) result(resp *flowcontrolv1.AcquireResponse, err error) *flowcontrolv1.DecideResponse {
	if err != nil {
		da.callSpan.SetStatus(otelcodes.Error, err.Error())
	}
	da.callSpan.End()
	answer := &da.reply.resp
	answer.Id = da.id
	if err != nil {
		answer.Result = errorResult(err)
	} else {
		da.reply.wrap.Acquire = resp
		answer.Result = &da.reply.wrap
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
