package frontend

import (
	"context"
	"net/http"
	"time"

	"github.com/meridian-cp/meridian/lib/identity"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/requestinfo"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// releaseTimeout bounds the Release call made after a request ends, whose
// own context may be gone.
const releaseTimeout = 5 * time.Second

// acquire takes seats for a request from the flow-control service and sets
// the X-Kubernetes-PF-* headers. The returned func releases them. A watch
// holds its seats only while it starts: its long life is not concurrency.
//
// When the flow-control service cannot be reached the request is served
// anyway (and logged): losing the fairness tier must not take the API down.
func (h *Handler) acquire(ctx context.Context, w http.ResponseWriter, info requestinfo.Info) (func(), error) {
	nop := func() {}
	if h.cfg.FlowControl == nil {
		return nop, nil
	}
	u, _ := identity.UserFrom(ctx)
	resp, err := h.cfg.FlowControl.Acquire(identity.AppendToOutgoing(ctx, u), &flowcontrolv1.AcquireRequest{
		GatewayId: h.cfg.GatewayID,
		Digest: &flowcontrolv1.RequestDigest{
			User: u.Name, Groups: u.Groups, Verb: info.Verb, ApiGroup: info.APIGroup, Resource: info.Resource,
			Subresource: info.Subresource, Namespace: info.Namespace, Name: info.Name, Path: info.Path,
			IsResourceRequest: info.IsResourceRequest, EstimatedWidth: 1,
		},
	})
	if err != nil {
		st := status.Convert(err)
		switch st.Code() {
		case codes.ResourceExhausted:
			retry := 1
			for _, d := range st.Details() {
				if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay().AsDuration() > 0 {
					retry = int(ri.GetRetryDelay().AsDuration().Round(time.Second) / time.Second)
					if retry < 1 {
						retry = 1
					}
				}
			}
			return nop, apierrors.NewTooManyRequests("too many requests, please try again later", retry)
		case codes.Canceled, codes.DeadlineExceeded:
			if ctx.Err() != nil {
				return nop, apierrors.NewTimeoutError("the request was cancelled while waiting for a seat", 0)
			}
		}
		h.cfg.Logger.Warn("flow control unavailable; serving without it", "error", err)
		return nop, nil
	}
	g := resp.GetGrant()
	w.Header().Set("X-Kubernetes-PF-FlowSchema-UID", g.GetFlowSchemaUid())
	w.Header().Set("X-Kubernetes-PF-PriorityLevel-UID", g.GetPriorityLevelUid())
	release := func() {
		if g.GetExempt() || g.GetId() == "" {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		if _, err := h.cfg.FlowControl.Release(rctx, &flowcontrolv1.ReleaseRequest{GrantId: g.GetId()}); err != nil {
			h.cfg.Logger.Warn("flow control release failed; the grant will expire", "error", err)
		}
	}
	if info.Verb == "watch" {
		release()
		return nop, nil
	}
	return release, nil
}
