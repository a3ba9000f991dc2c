// Package flowclient takes seats from the flow-control service for one
// request and gives them back, for both of the gateway's front doors (REST
// and gRPC).
package flowclient

import (
	"context"
	"log/slog"
	"time"

	"github.com/meridian-cp/meridian/lib/identity"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// releaseTimeout bounds the Release call made after a request ends, whose
// own context may be gone.
const releaseTimeout = 5 * time.Second

// Client acquires seats. A nil *Client serves every request at once.
type Client struct {
	fc        flowcontrolv1.FlowControlServiceClient
	gatewayID string
	log       *slog.Logger
}

// New returns a Client; fc nil returns nil (no flow control).
func New(fc flowcontrolv1.FlowControlServiceClient, gatewayID string, log *slog.Logger) *Client {
	if fc == nil {
		return nil
	}
	if log == nil {
		log = slog.Default()
	}
	return &Client{fc: fc, gatewayID: gatewayID, log: log}
}

// Grant is what Acquire hands out.
type Grant struct {
	// FlowSchemaUID and PriorityLevelUID are sent to REST clients as
	// X-Kubernetes-PF-FlowSchema-UID and X-Kubernetes-PF-PriorityLevel-UID.
	FlowSchemaUID, PriorityLevelUID string
	// Release returns the seats; it is safe to call more than once.
	Release func()
}

// Acquire waits for seats for a request described by digest. A rejection is
// a 429 TooManyRequests with Retry-After. When the flow-control service
// cannot be reached the request is served anyway (and logged): losing the
// fairness tier must not take the API down.
func (c *Client) Acquire(ctx context.Context, digest *flowcontrolv1.RequestDigest) (Grant, error) {
	nop := Grant{Release: func() {}}
	if c == nil {
		return nop, nil
	}
	u, _ := identity.UserFrom(ctx)
	if digest.User == "" {
		digest.User, digest.Groups = u.Name, u.Groups
	}
	if digest.EstimatedWidth == 0 {
		digest.EstimatedWidth = 1
	}
	resp, err := c.fc.Acquire(identity.AppendToOutgoing(ctx, u), &flowcontrolv1.AcquireRequest{GatewayId: c.gatewayID, Digest: digest})
	if err != nil {
		st := status.Convert(err)
		switch st.Code() {
		case codes.ResourceExhausted:
			retry := 1
			for _, d := range st.Details() {
				if ri, ok := d.(*errdetails.RetryInfo); ok {
					if s := int(ri.GetRetryDelay().AsDuration().Round(time.Second) / time.Second); s > retry {
						retry = s
					}
				}
			}
			return nop, apierrors.NewTooManyRequests("too many requests, please try again later", retry)
		case codes.Canceled, codes.DeadlineExceeded:
			if ctx.Err() != nil {
				return nop, apierrors.NewTimeoutError("the request was cancelled while waiting for a seat", 0)
			}
		}
		c.log.Warn("flow control unavailable; serving without it", "error", err)
		return nop, nil
	}
	g := resp.GetGrant()
	out := Grant{FlowSchemaUID: g.GetFlowSchemaUid(), PriorityLevelUID: g.GetPriorityLevelUid(), Release: func() {}}
	if g.GetExempt() || g.GetId() == "" {
		return out, nil
	}
	released := false
	out.Release = func() {
		if released {
			return
		}
		released = true
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		if _, err := c.fc.Release(rctx, &flowcontrolv1.ReleaseRequest{GrantId: g.GetId()}); err != nil && status.Code(err) != codes.NotFound {
			c.log.Warn("flow control release failed; the grant will expire", "error", err)
		}
	}
	return out, nil
}

// Heartbeat keeps this gateway's grants alive until ctx ends.
func (c *Client) Heartbeat(ctx context.Context) {
	if c == nil {
		return
	}
	interval := 5 * time.Second
	for {
		resp, err := c.fc.Heartbeat(ctx, &flowcontrolv1.HeartbeatRequest{GatewayId: c.gatewayID})
		if err == nil && resp.GetInterval().AsDuration() > 0 {
			interval = resp.GetInterval().AsDuration()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
