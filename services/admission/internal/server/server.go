// Package server is the gRPC face of the admission service: it validates
// AdmitRequests, runs the policy pipeline and turns its Result into an
// AdmitResponse.
package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/meridian-cp/meridian/lib/grpcserver"
	"github.com/meridian-cp/meridian/lib/telemetry"
	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/internal/admissionmetrics"
	"github.com/meridian-cp/meridian/services/admission/internal/policy"
)

// Server implements admissionv1.AdmissionServiceServer. Close ends its
// scope streams; the gRPC server's GracefulStop waits for them.
type Server struct {
	admissionv1.UnimplementedAdmissionServiceServer
	set      policy.Set
	eval     policy.Evaluator
	duration *prometheus.HistogramVec // operation, allowed
	scopes   *grpcserver.Changes      // the WatchScope streams
}

var _ admissionv1.AdmissionServiceServer = (*Server)(nil)

// New returns a Server evaluating set (nil: policy.Empty); metrics go to
// reg (nil: none).
func New(set policy.Set, reg prometheus.Registerer) (*Server, error) {
	if set == nil {
		set = policy.Empty{}
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	h, err := telemetry.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "meridian_admission_duration_seconds",
		Help:    "Latency of admission decisions (all matching policies of one request), by operation and verdict.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"operation", "allowed"}))
	if err != nil {
		return nil, fmt.Errorf("admission: %w", err)
	}
	m, err := admissionmetrics.New(reg)
	if err != nil {
		return nil, err
	}
	return &Server{set: set, eval: policy.Evaluator{Set: set, Metrics: m}, duration: h, scopes: grpcserver.NewChanges("admission")}, nil
}

// Close ends every WatchScope stream with UNAVAILABLE (the gateways then
// call Admit for everything until they reach a serving replica) and makes
// new ones end at once. It is safe to call more than once.
func (s *Server) Close() { s.scopes.Close() }

// WatchScope sends the policy set's scope, then the new one each time the
// set changes (a static set's never does), until the call ends or the
// server closes.
func (s *Server) WatchScope(_ *admissionv1.WatchScopeRequest, stream grpc.ServerStreamingServer[admissionv1.WatchScopeResponse]) error {
	return grpcserver.SendChanges(s.scopes, stream, func() (*admissionv1.WatchScopeResponse, <-chan struct{}) {
		sc, changed := s.set.Scope()
		return &admissionv1.WatchScopeResponse{Scope: scopeProto(sc)}, changed
	})
}

// scopeProto is sc on the wire.
func scopeProto(sc policy.Scope) *admissionv1.Scope {
	out := &admissionv1.Scope{Everything: sc.Everything}
	if sc.Everything {
		return out
	}
	for _, r := range sc.Rules {
		out.Rules = append(out.Rules, &admissionv1.ScopeRule{
			Operations: r.Operations, ApiGroups: r.APIGroups, Resources: r.Resources,
		})
	}
	return out
}

// Admit evaluates every policy that matches the request.
func (s *Server) Admit(ctx context.Context, req *admissionv1.AdmitRequest) (*admissionv1.AdmitResponse, error) {
	if err := validate(req); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	start := time.Now()
	res, err := s.eval.Admit(ctx, req)
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
	s.duration.WithLabelValues(operation(req.GetOperation()), strconv.FormatBool(res.Allowed)).Observe(time.Since(start).Seconds())
	resp := &admissionv1.AdmitResponse{
		Allowed:          res.Allowed,
		Warnings:         res.Warnings,
		AuditAnnotations: res.AuditAnnotations,
		Patch:            res.Patch,
	}
	if d := res.Denial; d != nil {
		resp.Status = &admissionv1.DenialStatus{Code: d.Code, Reason: d.Reason, Message: d.Message}
	}
	return resp, nil
}

// validate reports every problem of req at once.
func validate(req *admissionv1.AdmitRequest) error {
	var errs []error
	switch op := req.GetOperation(); op {
	case admissionv1.Operation_OPERATION_CREATE, admissionv1.Operation_OPERATION_UPDATE,
		admissionv1.Operation_OPERATION_DELETE, admissionv1.Operation_OPERATION_CONNECT:
	case admissionv1.Operation_OPERATION_UNSPECIFIED:
		errs = append(errs, errors.New("operation is required"))
	default:
		errs = append(errs, fmt.Errorf("unknown operation %d", op))
	}
	r := req.GetResource()
	switch {
	case r == nil:
		errs = append(errs, errors.New("resource is required"))
	case r.GetResource() == "":
		errs = append(errs, errors.New("resource.resource is required"))
	case r.GetVersion() == "":
		errs = append(errs, errors.New("resource.version is required"))
	}
	return errors.Join(errs...)
}

// operation is the label value of op: CREATE, UPDATE, DELETE or CONNECT.
func operation(op admissionv1.Operation) string {
	return strings.TrimPrefix(op.String(), "OPERATION_")
}
