package frontend

import (
	"net/http"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/meridian-cp/meridian/lib/telemetry"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/requestinfo"
	"github.com/meridian-cp/meridian/services/apigateway/internal/watchinit"
)

// The X-Kubernetes-PF-* headers, in their canonical form, which
// Header.Set uses as it is rather than making it per request.
const (
	flowSchemaUIDHeader    = "X-Kubernetes-Pf-Flowschema-Uid"
	priorityLevelUIDHeader = "X-Kubernetes-Pf-Prioritylevel-Uid"
)

// acquire takes seats for a request and sets the X-Kubernetes-PF-*
// headers. The returned func releases them; the returned request is r,
// or for a watch r with a context that releases them once the watch has
// sent its initial events (watchinit): a watch holds its seats only
// while it sends the state it starts with, as kube-apiserver's, its long
// life after that is not concurrency. A list takes the seats of the
// objects it will process, a write those of the notifications it
// causes (worksize).
func (h *Handler) acquire(w http.ResponseWriter, r *http.Request, info requestinfo.Info) (*http.Request, func(), error) {
	digest := &flowcontrolv1.RequestDigest{
		Verb: info.Verb, ApiGroup: info.APIGroup, Resource: info.Resource, Subresource: info.Subresource,
		Namespace: info.Namespace, Name: info.Name, Path: info.Path, IsResourceRequest: info.IsResourceRequest,
	}
	if info.Verb == "list" {
		gvr := schema.GroupVersionResource{Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource}
		digest.EstimatedWidth = h.cfg.WorkSize.ListSeats(gvr, r.URL.Query(), info.Name != "")
	}
	// A write is charged for the watch notifications it causes.
	h.cfg.WorkSize.EstimateWrite(digest)
	ctx, span := telemetry.StartSpan(r.Context(), telemetry.ScopeGateway, "flowcontrol.acquire")
	g, err := h.cfg.FlowControl.Acquire(ctx, digest)
	if span.IsRecording() {
		span.SetAttributes(attrFlowSchema.String(g.FlowSchemaUID), attrPriority.String(g.PriorityLevelUID))
		span.End()
	}
	noteFlowSchema(r.Context(), g.FlowSchemaUID, g.PriorityLevelUID)
	if g.FlowSchemaUID != "" {
		// On a rejection too, as kube-apiserver sets them at classification.
		w.Header().Set(flowSchemaUIDHeader, g.FlowSchemaUID)
		w.Header().Set(priorityLevelUIDHeader, g.PriorityLevelUID)
	}
	if err != nil {
		return r, nil, err
	}
	if info.Verb == "watch" {
		r = r.WithContext(watchinit.With(r.Context(), g.Release))
	}
	return r, g.Release, nil
}
