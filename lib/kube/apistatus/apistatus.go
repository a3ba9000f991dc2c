// Package apistatus converts between the three forms an API error takes in
// the gateway: a Kubernetes StatusError (how handlers build errors, with
// k8s.io/apimachinery/pkg/api/errors), a gRPC status carrying an apiv1.Status
// detail (how errors cross the ResourceService boundary, so gRPC clients get
// the same reason and details REST clients get), and a meta/v1 Status object
// with an HTTP code (what the REST surface writes).
//
// The code tables live here and nowhere else.
package apistatus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// grpcCodeForHTTP maps the HTTP code of a Kubernetes Status to the gRPC code
// of the status that carries it. Two reasons share 409; AlreadyExists is
// told apart by reason.
var grpcCodeForHTTP = map[int32]codes.Code{
	http.StatusBadRequest:            codes.InvalidArgument,
	http.StatusUnauthorized:          codes.Unauthenticated,
	http.StatusForbidden:             codes.PermissionDenied,
	http.StatusNotFound:              codes.NotFound,
	http.StatusMethodNotAllowed:      codes.Unimplemented,
	http.StatusNotAcceptable:         codes.InvalidArgument,
	http.StatusConflict:              codes.Aborted,
	http.StatusGone:                  codes.OutOfRange,
	http.StatusRequestEntityTooLarge: codes.InvalidArgument,
	http.StatusUnsupportedMediaType:  codes.InvalidArgument,
	http.StatusUnprocessableEntity:   codes.InvalidArgument,
	http.StatusTooManyRequests:       codes.ResourceExhausted,
	http.StatusInternalServerError:   codes.Internal,
	http.StatusServiceUnavailable:    codes.Unavailable,
	http.StatusGatewayTimeout:        codes.DeadlineExceeded,
}

// httpCodeForGRPC maps a gRPC code without a Status detail (an error from a
// transport or a generic layer) to the HTTP code and reason a Kubernetes
// client expects for it.
var httpCodeForGRPC = map[codes.Code]struct {
	code   int32
	reason metav1.StatusReason
}{
	codes.InvalidArgument:    {http.StatusBadRequest, metav1.StatusReasonBadRequest},
	codes.Unauthenticated:    {http.StatusUnauthorized, metav1.StatusReasonUnauthorized},
	codes.PermissionDenied:   {http.StatusForbidden, metav1.StatusReasonForbidden},
	codes.NotFound:           {http.StatusNotFound, metav1.StatusReasonNotFound},
	codes.AlreadyExists:      {http.StatusConflict, metav1.StatusReasonAlreadyExists},
	codes.Aborted:            {http.StatusConflict, metav1.StatusReasonConflict},
	codes.OutOfRange:         {http.StatusGone, metav1.StatusReasonExpired},
	codes.FailedPrecondition: {http.StatusBadRequest, metav1.StatusReasonBadRequest},
	codes.Unimplemented:      {http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed},
	codes.ResourceExhausted:  {http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests},
	codes.Unavailable:        {http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable},
	codes.DeadlineExceeded:   {http.StatusGatewayTimeout, metav1.StatusReasonTimeout},
	codes.Canceled:           {499, metav1.StatusReasonTimeout},
}

// ToGRPC converts err to a gRPC status error carrying an apiv1.Status detail.
// A Kubernetes StatusError keeps its code, reason, message and details; a
// gRPC status error passes through unchanged; anything else becomes a 500
// InternalError. Context cancellation and deadlines map to their gRPC codes.
func ToGRPC(err error) error {
	if err == nil {
		return nil
	}
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return fromStatus(se.Status())
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return fromStatus(apierrors.NewTimeoutError(err.Error(), 0).Status())
	}
	return fromStatus(apierrors.NewInternalError(err).Status())
}

func fromStatus(s metav1.Status) error {
	code, ok := grpcCodeForHTTP[s.Code]
	if !ok {
		code = codes.Unknown
	}
	if s.Reason == metav1.StatusReasonAlreadyExists {
		code = codes.AlreadyExists
	}
	detail := &apiv1.Status{Code: s.Code, Reason: string(s.Reason), Message: s.Message, ContinueToken: s.Continue}
	if s.Details != nil {
		detail.DetailsJson, _ = json.Marshal(s.Details)
		detail.RetryAfterSeconds = s.Details.RetryAfterSeconds
	}
	st, err := status.New(code, s.Message).WithDetails(detail)
	if err != nil {
		return status.Error(code, s.Message)
	}
	return st.Err()
}

// FromGRPC converts a gRPC status error to the Kubernetes Status the REST
// surface returns. A status with an apiv1.Status detail is restored exactly;
// others are mapped by code.
func FromGRPC(st *status.Status) metav1.Status {
	if s, ok := Detail(st); ok {
		out := metav1.Status{
			Status:   metav1.StatusFailure,
			Code:     s.Code,
			Reason:   metav1.StatusReason(s.Reason),
			Message:  s.Message,
			ListMeta: metav1.ListMeta{Continue: s.ContinueToken},
		}
		if len(s.DetailsJson) > 0 {
			var details metav1.StatusDetails
			if json.Unmarshal(s.DetailsJson, &details) == nil {
				out.Details = &details
			}
		}
		return out
	}
	m, ok := httpCodeForGRPC[st.Code()]
	if !ok {
		m.code, m.reason = http.StatusInternalServerError, metav1.StatusReasonInternalError
	}
	return metav1.Status{Status: metav1.StatusFailure, Code: m.code, Reason: m.reason, Message: st.Message()}
}

// Detail returns the Kubernetes Status that ToGRPC attached to st as its
// apiv1.Status detail; false when st has none.
func Detail(st *status.Status) (*apiv1.Status, bool) {
	for _, d := range st.Details() {
		if s, ok := d.(*apiv1.Status); ok {
			return s, true
		}
	}
	return nil, false
}

// FromError converts any error to the Kubernetes Status the REST surface
// returns for it.
func FromError(err error) metav1.Status {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		s := se.Status()
		s.Status = metav1.StatusFailure
		return s
	}
	st, _ := status.FromError(ToGRPC(err))
	return FromGRPC(st)
}

// TooLargeResourceVersion is the 504 kube-apiserver returns when a read
// asks for a resourceVersion that storage (or a cache) has not reached in
// time: a Timeout with a ResourceVersionTooLarge cause and Retry-After 1.
func TooLargeResourceVersion(requested, current int64) *apierrors.StatusError {
	err := apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: %d", requested, current), 1)
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{
		Type:    metav1.CauseTypeResourceVersionTooLarge,
		Message: "Too large resource version",
	}}
	return err
}
