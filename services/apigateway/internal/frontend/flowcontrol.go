package frontend

import (
	"net/http"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/meridian-cp/meridian/lib/telemetry"
	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/requestinfo"
)

// acquire takes seats for a request and sets the X-Kubernetes-PF-*
// headers. The returned func releases them. A watch holds its seats only
// while it starts: its long life is not concurrency. A list takes the
// seats of the objects it will process (worksize).
func (h *Handler) acquire(w http.ResponseWriter, r *http.Request, info requestinfo.Info) (func(), error) {
	digest := &flowcontrolv1.RequestDigest{
		Verb: info.Verb, ApiGroup: info.APIGroup, Resource: info.Resource, Subresource: info.Subresource,
		Namespace: info.Namespace, Name: info.Name, Path: info.Path, IsResourceRequest: info.IsResourceRequest,
	}
	if info.Verb == "list" {
		gvr := schema.GroupVersionResource{Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource}
		digest.EstimatedWidth = h.cfg.WorkSize.ListSeats(gvr, r.URL.Query(), info.Name != "")
	}
	ctx, span := telemetry.StartSpan(r.Context(), telemetry.ScopeGateway, "flowcontrol.acquire")
	g, err := h.cfg.FlowControl.Acquire(ctx, digest)
	if span.IsRecording() {
		span.SetAttributes(attrFlowSchema.String(g.FlowSchemaUID), attrPriority.String(g.PriorityLevelUID))
		span.End()
	}
	noteFlowSchema(r.Context(), g.FlowSchemaUID, g.PriorityLevelUID)
	if g.FlowSchemaUID != "" {
		// On a rejection too, as kube-apiserver sets them at classification.
		w.Header().Set("X-Kubernetes-PF-FlowSchema-UID", g.FlowSchemaUID)
		w.Header().Set("X-Kubernetes-PF-PriorityLevel-UID", g.PriorityLevelUID)
	}
	if err != nil {
		return nil, err
	}
	if info.Verb == "watch" {
		g.Release()
		return func() {}, nil
	}
	return g.Release, nil
}
