package frontend

import (
	"context"
	"net/http"

	flowcontrolv1 "github.com/meridian-cp/meridian/proto/gen/meridian/flowcontrol/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/requestinfo"
)

// acquire takes seats for a request and sets the X-Kubernetes-PF-*
// headers. The returned func releases them. A watch holds its seats only
// while it starts: its long life is not concurrency.
func (h *Handler) acquire(ctx context.Context, w http.ResponseWriter, info requestinfo.Info) (func(), error) {
	g, err := h.cfg.FlowControl.Acquire(ctx, &flowcontrolv1.RequestDigest{
		Verb: info.Verb, ApiGroup: info.APIGroup, Resource: info.Resource, Subresource: info.Subresource,
		Namespace: info.Namespace, Name: info.Name, Path: info.Path, IsResourceRequest: info.IsResourceRequest,
	})
	if err != nil {
		return nil, err
	}
	if g.FlowSchemaUID != "" {
		w.Header().Set("X-Kubernetes-PF-FlowSchema-UID", g.FlowSchemaUID)
		w.Header().Set("X-Kubernetes-PF-PriorityLevel-UID", g.PriorityLevelUID)
	}
	if info.Verb == "watch" {
		g.Release()
		return func() {}, nil
	}
	return g.Release, nil
}
