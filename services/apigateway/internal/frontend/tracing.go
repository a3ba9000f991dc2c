package frontend

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/meridian-cp/meridian/lib/telemetry"
	"github.com/meridian-cp/meridian/services/apigateway/internal/requestinfo"
)

// Span attribute keys of the gateway's spans: what an operator filters a
// request's trace on.
const (
	attrVerb        = attribute.Key("k8s.verb")
	attrResource    = attribute.Key("k8s.resource")
	attrSubresource = attribute.Key("k8s.subresource")
	attrNamespace   = attribute.Key("k8s.namespace")
	attrName        = attribute.Key("k8s.name")
	attrAuditID     = attribute.Key("k8s.audit_id")
	attrUser        = attribute.Key("k8s.user")
	attrAuthOK      = attribute.Key("k8s.authenticated")
	attrFlowSchema  = attribute.Key("k8s.flowcontrol.flow_schema_uid")
	attrPriority    = attribute.Key("k8s.flowcontrol.priority_level_uid")
)

// nameRequestSpan names the request's server span (lib/telemetry's
// HTTPHandler started it) after what the request addresses, as
// kube-apiserver's verb label and resource say, e.g. "CREATE pods", and
// records the request's coordinates on it. A no-op when the request is
// not sampled.
func nameRequestSpan(ctx context.Context, verb string, info *requestinfo.Info, auditID string) {
	if !telemetry.Traced(ctx) {
		return
	}
	span := trace.SpanFromContext(ctx)
	name := verb
	if info.IsResourceRequest {
		name += " " + info.Resource
		if info.Subresource != "" {
			name += "/" + info.Subresource
		}
	} else {
		name += " " + info.Path
	}
	span.SetName(name)
	span.SetAttributes(attrVerb.String(verb), attrResource.String(info.Resource), attrSubresource.String(info.Subresource),
		attrNamespace.String(info.Namespace), attrName.String(info.Name), attrAuditID.String(auditID))
}
