package flowcontrolclient

import (
	"context"
	"errors"
	"math"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/meridian-cp/meridian/lib/flowcontrol/apf"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
)

// fallbackGateway is the gateway id of the local limiter's grants.
const fallbackGateway = "local"

// SetFallback makes the client take seats from local, the gateway's own
// APF core with the fleet's configuration and this gateway's share of
// the server limit, while the flow-control service cannot be reached:
// degraded (one gateway's view of fairness) rather than wide open.
// Without it such requests are served without seats. Its configuration
// also decides, without the service, the non-resource requests of exempt
// levels (exemptLocally). Call it before the client is used.
func (c *Client) SetFallback(local *apf.Controller) {
	if c != nil {
		c.fallback = local
	}
}

// acquireLocally takes seats from the fallback limiter; ok is false when
// there is none (the request is then served without seats).
func (c *Client) acquireLocally(ctx context.Context, d *flowcontrolv1.RequestDigest) (g Grant, ok bool, err error) {
	if c.fallback == nil {
		return Grant{}, false, nil
	}
	lg, err := c.fallback.Acquire(ctx, fallbackGateway, localDigest(d))
	var rej *apf.RejectedError
	switch {
	case errors.As(err, &rej):
		retry := int(math.Ceil(c.fallback.RetryAfter().Seconds()))
		return Grant{FlowSchemaUID: rej.FlowSchemaUID, PriorityLevelUID: rej.PriorityLevelUID, Release: func() {}},
			true, apierrors.NewTooManyRequests("too many requests, please try again later", retry)
	case err != nil:
		if ctx.Err() != nil {
			return Grant{Release: func() {}}, true, apierrors.NewTimeoutError("the request was cancelled while waiting for a seat", 0)
		}
		return Grant{}, false, nil
	}
	out := Grant{FlowSchemaUID: lg.FlowSchemaUID, PriorityLevelUID: lg.PriorityLevelUID, Release: func() {}}
	if lg.ID != "" {
		var released atomic.Bool
		out.Release = func() {
			if released.CompareAndSwap(false, true) {
				_ = c.fallback.Release(context.Background(), lg.ID)
			}
		}
	}
	return out, true, nil
}

// localDigest is d as the local limiter reads it.
func localDigest(d *flowcontrolv1.RequestDigest) apf.Digest {
	return apf.Digest{
		User: d.GetUser(), Groups: d.GetGroups(), Verb: d.GetVerb(), APIGroup: d.GetApiGroup(), Resource: d.GetResource(),
		Subresource: d.GetSubresource(), Namespace: d.GetNamespace(), Name: d.GetName(), Path: d.GetPath(),
		IsResourceRequest: d.GetIsResourceRequest(), Width: d.GetEstimatedWidth(),
		FinalSeats: d.GetFinalSeats(), AdditionalLatency: d.GetAdditionalLatency().AsDuration(),
	}
}

// exemptLocally classifies a non-resource request by the local
// limiter's configuration (the stored FlowSchemas and
// PriorityLevelConfigurations, which the service follows too) and, when
// its level is exempt, returns the exempt grant the service would have
// given, holding nothing; ok is false for a resource request, a limited
// level, or a client without a local limiter.
//
// Health probes are why: the suggested probes FlowSchema (or the spec's
// health-for-strangers) sends /healthz, /livez and /readyz to the exempt
// level, and an answer to a kubelet's probe must not wait for, or
// depend on, the flow-control service. Exemptions by caller are the
// service's list (WatchExemptions); exemptions by path cannot be
// expressed there, as they depend on the request. Resource requests are
// left to the service: their exempt callers are on that list. The local
// view may trail the service's by a store round trip; until the gateway
// first reads the stored objects it is the bootstrap configuration
// (apf.Bootstrap), whose probes schema exempts the same probes.
func (c *Client) exemptLocally(d *flowcontrolv1.RequestDigest) (Grant, bool) {
	if c.fallback == nil || d.GetIsResourceRequest() {
		return Grant{}, false
	}
	ld := localDigest(d)
	cl := c.fallback.Classify(&ld)
	if !cl.Exempt {
		return Grant{}, false
	}
	return Grant{FlowSchemaUID: cl.FlowSchemaUID, PriorityLevelUID: cl.PriorityLevelUID, Release: func() {}}, true
}
