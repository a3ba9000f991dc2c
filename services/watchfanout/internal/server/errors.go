package server

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

// grpcCode maps the HTTP code of a Kubernetes Status to the gRPC code that
// carries it (the same table as the gateway's; to be shared in lib).
var grpcCode = map[int32]codes.Code{
	http.StatusBadRequest:          codes.InvalidArgument,
	http.StatusNotFound:            codes.NotFound,
	http.StatusNotAcceptable:       codes.InvalidArgument,
	http.StatusGone:                codes.OutOfRange,
	http.StatusTooManyRequests:     codes.ResourceExhausted,
	http.StatusInternalServerError: codes.Internal,
	http.StatusServiceUnavailable:  codes.Unavailable,
	http.StatusGatewayTimeout:      codes.DeadlineExceeded,
}

// apiStatus returns the Kubernetes Status of err: a StatusError keeps its
// own; context errors are 504 Timeout; anything else is a 500.
func apiStatus(err error) metav1.Status {
	var se apierrors.APIStatus
	switch {
	case errors.As(err, &se):
		return se.Status()
	case errors.Is(err, context.DeadlineExceeded):
		return apierrors.NewTimeoutError(err.Error(), 1).Status()
	}
	return apierrors.NewInternalError(err).Status()
}

// toGRPC converts err to a gRPC status error carrying a meridian.api.v1
// Status detail, as watch.v1 promises for errors before a stream starts
// and for unary calls.
func toGRPC(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return status.Error(codes.Canceled, err.Error())
	}
	s := apiStatus(err)
	code, ok := grpcCode[s.Code]
	if !ok {
		code = codes.Unknown
	}
	detail := &apiv1.Status{Code: s.Code, Reason: string(s.Reason), Message: s.Message}
	if s.Details != nil {
		detail.DetailsJson, _ = json.Marshal(s.Details)
		detail.RetryAfterSeconds = s.Details.RetryAfterSeconds
	}
	st, derr := status.New(code, s.Message).WithDetails(detail)
	if derr != nil {
		return status.Error(code, s.Message)
	}
	return st.Err()
}

// tooLargeResourceVersion is the 504 kube-apiserver returns when a read
// asks for a resourceVersion the cache has not reached in time.
func tooLargeResourceVersion(requested, current int64) error {
	err := apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: %d", requested, current), 1)
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{
		Type:    metav1.CauseTypeResourceVersionTooLarge,
		Message: "Too large resource version",
	}}
	return err
}

// notSynced is the 503 served before the cache has synced with the store.
func notSynced() error {
	return apierrors.NewServiceUnavailable("the watch cache is not synced with the store yet")
}
