// Package server is the gRPC face of the flow-control service: it
// translates FlowControlService calls to the apf.Controller and its errors
// to gRPC codes, in one table (toStatus).
package server

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/meridian-cp/meridian/lib/flowcontrol/apf"
	"github.com/meridian-cp/meridian/lib/grpcserver"
	"github.com/meridian-cp/meridian/lib/telemetry"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
)

// Server implements flowcontrolv1.FlowControlServiceServer and, over
// the same methods, flowcontrolv1.DecisionServiceServer. Close ends
// its exemption streams; the gRPC server's GracefulStop waits for them.
type Server struct {
	flowcontrolv1.UnimplementedFlowControlServiceServer
	flowcontrolv1.UnimplementedDecisionServiceServer
	ctrl       *apf.Controller
	exemptions *grpcserver.Changes // the WatchExemptions streams
	// closing is closed by Close: it ends the Decide streams.
	closing   chan struct{}
	closeOnce sync.Once
	// leadership gates every call about seats; nil: this replica always
	// leads (a single replica).
	leadership Leadership
	// terms names the terms, for the term fields of the answers.
	terms terms
	// tracer starts a Decide call's span under its caller's (the
	// traceparent the call carries); nil: no spans for Decide calls.
	tracer trace.TracerProvider
	// acquires recycles the Decide streams' *decideAcquire once their
	// answers are sent.
	acquires sync.Pool
}

var _ flowcontrolv1.FlowControlServiceServer = (*Server)(nil)

// New returns a Server over ctrl; the caller owns ctrl. With a
// Leadership, Acquire, Release, ReleaseGrants, AdoptGrants, Heartbeat
// and Dump are served only during a term (else UNAVAILABLE,
// NotLeaderReason), and an Acquire still queued when the term ends fails
// the same way; without one, the Server's lifetime is one term;
// WatchExemptions, which follows the configuration every replica reads,
// is served by all.
//
// tp traces the Acquires of Decide streams: a unary call's span comes from
// the gRPC server's interceptors, a stream's calls each carry their
// caller's traceparent instead; nil traces none of them.
func New(ctrl *apf.Controller, leadership Leadership, tp trace.TracerProvider) *Server {
	return &Server{ctrl: ctrl, exemptions: grpcserver.NewChanges("flowcontrol"), closing: make(chan struct{}), leadership: leadership, tracer: tp}
}

// Close ends every WatchExemptions and Decide stream with UNAVAILABLE
// and makes new ones end at once. It is safe to call more than once.
func (s *Server) Close() {
	s.exemptions.Close()
	s.closeOnce.Do(func() { close(s.closing) })
}

// WatchExemptions sends the exemptions, then the new list each time the
// configuration changes (a fixed configuration never does), until the
// call ends or the server closes.
func (s *Server) WatchExemptions(_ *flowcontrolv1.WatchExemptionsRequest, stream grpc.ServerStreamingServer[flowcontrolv1.WatchExemptionsResponse]) error {
	return grpcserver.SendChanges(s.exemptions, stream, func() (*flowcontrolv1.WatchExemptionsResponse, <-chan struct{}) {
		ex, changed := s.ctrl.Exemptions()
		resp := &flowcontrolv1.WatchExemptionsResponse{}
		for _, e := range ex {
			resp.Exemptions = append(resp.Exemptions, &flowcontrolv1.Exemption{
				FlowSchema: e.FlowSchema, FlowSchemaUid: e.FlowSchemaUID,
				PriorityLevel: e.PriorityLevel, PriorityLevelUid: e.PriorityLevelUID,
				Users: e.Users, Groups: e.Groups,
			})
		}
		return resp, changed
	})
}

// Acquire classifies the request and blocks until it is granted seats.
// A gateway that last heard another term (req.Term) is answered
// NEW_TERM and granted nothing until it asks with this term, which it
// does once it has re-registered its grants (AdoptGrants): so a new
// leader counts the seats a gateway holds from the previous one before
// it hands that gateway more.
func (s *Server) Acquire(ctx context.Context, req *flowcontrolv1.AcquireRequest) (*flowcontrolv1.AcquireResponse, error) {
	a := new(acquireCall)
	if err := s.startAcquire(ctx, req, a); err != nil {
		return nil, err
	}
	g, err := a.s.ctrl.Acquire(a.ctx, a.gw, a.digest)
	return a.answer(g, err, new(acquireReply))
}

// acquireCall is an Acquire past its checks of the request and the term,
// to be decided once: by Acquire, blocking, or by a Decide stream
// (apf.Controller.AcquireFunc).
type acquireCall struct {
	s    *Server
	ctx  context.Context // ends with the term; carries the flowcontrol.wait span
	span trace.Span      // flowcontrol.wait
	// stopTerm stops watching the term; nil while there is no leadership.
	stopTerm func()
	term     context.Context
	gw       string
	digest   apf.Digest
}

// acquireReply holds the messages of one Acquire answer, allocated
// together: a Decide stream reuses them once the answer is sent.
type acquireReply struct {
	resp  flowcontrolv1.DecideResponse
	wrap  flowcontrolv1.DecideResponse_Acquire
	acq   flowcontrolv1.AcquireResponse
	grant flowcontrolv1.Grant
	wait  durationpb.Duration
}

// startAcquire checks req and the term, fills a with the call to decide
// and starts its flowcontrol.wait span. An error is the call's answer;
// a is then not started.
func (s *Server) startAcquire(ctx context.Context, req *flowcontrolv1.AcquireRequest, a *acquireCall) error {
	d := req.GetDigest()
	if d == nil {
		return status.Error(codes.InvalidArgument, "digest is required")
	}
	term, err := s.term()
	if err != nil {
		return err
	}
	if heard := req.GetTerm(); heard != "" {
		if id := s.terms.idOf(term); heard != id {
			return newTerm(id)
		}
	}
	if s.leadership != nil {
		// A request queued when the term ends leaves its queue.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		stop := context.AfterFunc(term, cancel)
		a.stopTerm = func() { stop(); cancel() }
	}
	a.s, a.term, a.gw = s, term, req.GetGatewayId()
	a.digest = apf.Digest{
		User:              d.GetUser(),
		Groups:            d.GetGroups(),
		Verb:              d.GetVerb(),
		APIGroup:          d.GetApiGroup(),
		Resource:          d.GetResource(),
		Subresource:       d.GetSubresource(),
		Namespace:         d.GetNamespace(),
		Name:              d.GetName(),
		Path:              d.GetPath(),
		IsResourceRequest: d.GetIsResourceRequest(),
		Width:             d.GetEstimatedWidth(),
		FinalSeats:        d.GetFinalSeats(),
		AdditionalLatency: d.GetAdditionalLatency().AsDuration(),
	}
	a.ctx, a.span = telemetry.StartSpan(ctx, telemetry.ScopeFlowControl, "flowcontrol.wait")
	return nil
}

// done ends the call's span and stops watching the term.
func (a *acquireCall) done() {
	a.span.End()
	if a.stopTerm != nil {
		a.stopTerm()
	}
}

// answer ends the call with Acquire's outcome g, err: the answer to
// send, made in r.
func (a *acquireCall) answer(g apf.Grant, err error, r *acquireReply) (*flowcontrolv1.AcquireResponse, error) {
	defer a.done()
	if a.term.Err() != nil {
		// The term ended while the request waited, or just after it was
		// granted: the Forget at the term's end may have missed this
		// grant, so it is given back here (twice is harmless).
		if err == nil && g.ID != "" {
			_ = a.s.ctrl.Release(context.WithoutCancel(a.ctx), g.ID)
		}
		_, leader := a.s.leadership.Term()
		return nil, notLeader(leader)
	}
	if a.span.IsRecording() {
		traceGrant(a.span, g, err)
	}
	if err != nil {
		return nil, a.s.toStatus(a.ctx, err)
	}
	// As durationpb.New, into r.
	secs := g.QueueWait / time.Second
	r.wait.Seconds, r.wait.Nanos = int64(secs), int32(g.QueueWait-secs*time.Second)
	r.grant.Id = g.ID
	r.grant.FlowSchema, r.grant.FlowSchemaUid = g.FlowSchema, g.FlowSchemaUID
	r.grant.PriorityLevel, r.grant.PriorityLevelUid = g.PriorityLevel, g.PriorityLevelUID
	r.grant.Seats, r.grant.Exempt = uint32(g.Seats), g.Exempt
	r.grant.QueueWait = &r.wait
	r.acq.Term, r.acq.Grant = a.s.terms.idOf(a.term), &r.grant
	return &r.acq, nil
}

// Release returns a grant's seats.
func (s *Server) Release(ctx context.Context, req *flowcontrolv1.ReleaseRequest) (*flowcontrolv1.ReleaseResponse, error) {
	if _, err := s.term(); err != nil {
		return nil, err
	}
	if err := s.ctrl.Release(ctx, req.GetGrantId()); err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &flowcontrolv1.ReleaseResponse{}, nil
}

// ReleaseGrants returns the seats of several grants; grants not held are
// counted, not errors. An empty id fails the call before anything is
// released.
func (s *Server) ReleaseGrants(ctx context.Context, req *flowcontrolv1.ReleaseGrantsRequest) (*flowcontrolv1.ReleaseGrantsResponse, error) {
	ids := req.GetGrantIds()
	if slices.Contains(ids, "") {
		return nil, status.Error(codes.InvalidArgument, "grant_ids must not be empty")
	}
	term, err := s.term()
	if err != nil {
		return nil, err
	}
	resp := &flowcontrolv1.ReleaseGrantsResponse{Term: s.terms.idOf(term)}
	for _, id := range ids {
		switch err := s.ctrl.Release(ctx, id); {
		case err == nil:
			resp.Released++
		case errors.Is(err, apf.ErrUnknownGrant):
			resp.NotFound++
		default:
			return nil, s.toStatus(ctx, err)
		}
	}
	return resp, nil
}

// Dump returns the state of every priority level.
func (s *Server) Dump(context.Context, *flowcontrolv1.DumpRequest) (*flowcontrolv1.DumpResponse, error) {
	if _, err := s.term(); err != nil {
		return nil, err
	}
	resp := &flowcontrolv1.DumpResponse{}
	for _, l := range s.ctrl.Dump() {
		ps := &flowcontrolv1.PriorityLevelState{
			Name: l.Name, Exempt: l.Exempt, Seats: uint32(l.Seats), SeatsInUse: uint32(l.SeatsInUse),
			ActiveQueues: uint32(l.ActiveQueues), Waiting: uint32(l.Waiting), Executing: uint32(l.Executing),
			Dispatched: l.Dispatched, Rejected: l.Rejected, TimedOut: l.TimedOut, Cancelled: l.Cancel, VirtualTime: l.VirtualTime,
		}
		for _, q := range l.Queues {
			ps.Queues = append(ps.Queues, &flowcontrolv1.QueueState{
				Waiting: uint32(q.Waiting), SeatsWaiting: uint32(q.SeatsWaiting), Executing: uint32(q.Executing),
				SeatsInUse: uint32(q.SeatsInUse), NextDispatchR: q.NextDispatchR, WorkWaiting: q.WorkWaiting,
			})
		}
		for _, r := range l.Requests {
			rs := &flowcontrolv1.RequestState{
				FlowSchema: r.FlowSchema, QueueIndex: int32(r.QueueIndex), IndexInQueue: int32(r.IndexInQueue),
				FlowDistinguisher: r.FlowDistinguisher, ArriveTime: timestamppb.New(r.Arrived), Seats: uint32(r.Seats),
				User: r.Digest.User, Verb: r.Digest.Verb, Path: r.Digest.Path, Namespace: r.Digest.Namespace, Name: r.Digest.Name,
				ApiGroup: r.Digest.APIGroup, Resource: r.Digest.Resource, Subresource: r.Digest.Subresource,
			}
			if !r.Started.IsZero() {
				rs.StartTime = timestamppb.New(r.Started)
			}
			ps.Requests = append(ps.Requests, rs)
		}
		resp.PriorityLevels = append(resp.PriorityLevels, ps)
	}
	return resp, nil
}

// Heartbeat keeps a gateway's grants alive.
func (s *Server) Heartbeat(ctx context.Context, req *flowcontrolv1.HeartbeatRequest) (*flowcontrolv1.HeartbeatResponse, error) {
	term, err := s.term()
	if err != nil {
		return nil, err
	}
	interval, err := s.ctrl.Heartbeat(ctx, req.GetGatewayId())
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	return &flowcontrolv1.HeartbeatResponse{Interval: durationpb.New(interval), Term: s.terms.idOf(term)}, nil
}

// AdoptGrants charges the grants a gateway holds from a previous term to
// this term (apf.Controller.Adopt).
func (s *Server) AdoptGrants(ctx context.Context, req *flowcontrolv1.AdoptGrantsRequest) (*flowcontrolv1.AdoptGrantsResponse, error) {
	term, err := s.term()
	if err != nil {
		return nil, err
	}
	grants := make([]apf.Grant, 0, len(req.GetGrants()))
	for _, g := range req.GetGrants() {
		grants = append(grants, apf.Grant{ID: g.GetId(), FlowSchema: g.GetFlowSchema(), PriorityLevel: g.GetPriorityLevel(), Seats: int(g.GetSeats())})
	}
	res, err := s.ctrl.Adopt(ctx, req.GetGatewayId(), grants)
	if err != nil {
		return nil, s.toStatus(ctx, err)
	}
	if term.Err() != nil {
		// The term ended meanwhile, and its Forget may have run before
		// this Adopt: the gateway goes to the next leader. What was
		// adopted here stays until the gateway's lease expires on this
		// replica (its heartbeats go elsewhere) or the replica's next
		// term starts (empty), whichever comes first.
		_, leader := s.leadership.Term()
		return nil, notLeader(leader)
	}
	return &flowcontrolv1.AdoptGrantsResponse{
		Term: s.terms.idOf(term), Adopted: uint32(res.Adopted), Held: uint32(res.Held),
		Released: uint32(res.Released), Unknown: uint32(res.Unknown),
	}, nil
}

// RejectedReason and RejectedDomain name the ErrorInfo of a rejection;
// its metadata holds flow_schema_uid, priority_level_uid and reason.
const (
	RejectedReason = "REQUEST_REJECTED"
	RejectedDomain = "flowcontrol.meridian-cp.io"
)

// toStatus maps the controller's errors to gRPC statuses. A rejection
// carries a RetryInfo detail, which the gateway turns into Retry-After,
// and an ErrorInfo with the UIDs of the flow schema and priority level
// that classified it, which the gateway sends as X-Kubernetes-PF-*.
func (s *Server) toStatus(ctx context.Context, err error) error {
	var rej *apf.RejectedError
	switch {
	case errors.As(err, &rej):
		st := status.New(codes.ResourceExhausted, err.Error())
		if ds, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(s.ctrl.RetryAfter())}, &errdetails.ErrorInfo{
			Reason: RejectedReason, Domain: RejectedDomain,
			Metadata: map[string]string{"flow_schema_uid": rej.FlowSchemaUID, "priority_level_uid": rej.PriorityLevelUID, "reason": rej.Reason},
		}); derr == nil {
			st = ds
		}
		return st.Err()
	case errors.Is(err, apf.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, apf.ErrUnknownGrant):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, apf.ErrClosed):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Error(codes.Internal, err.Error())
}
