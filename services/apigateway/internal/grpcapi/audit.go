package grpcapi

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/meridian-cp/meridian/lib/kube/apistatus"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/audit"
	"google.golang.org/genproto/googleapis/api/httpbody"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// auditIDKey is the metadata key of a call's Audit-Id, in both
// directions: a client may send its own, and every response header
// carries it.
const auditIDKey = "audit-id"

// auditIDCtxKey carries the call's Audit-Id from guard to admit.
type auditIDCtxKey struct{}

// auditID is a call's Audit-Id: the one the client sent, or a new UUID.
// Every call of the ResourceService gets it as audit-id metadata: in the
// response header (guard for unary calls, the stream interceptor for
// streams), or, for a call tap refused, which ends in a trailers-only
// response, with its status in the trailer.
func auditID(ctx context.Context) string {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(auditIDKey); len(v) > 0 && v[0] != "" {
			return v[0]
		}
	}
	return uuid.NewString()
}

// meta is the audit description of the call of ctx to method.
func meta(ctx context.Context, method string, watch bool) audit.Meta {
	m := audit.Meta{RequestURI: method, Received: time.Now(), LongRunning: watch}
	m.AuditID, _ = ctx.Value(auditIDCtxKey{}).(string)
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get("user-agent"); len(v) > 0 {
			m.UserAgent = v[0]
		}
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		host, _, err := net.SplitHostPort(p.Addr.String())
		if err != nil {
			host = p.Addr.String()
		}
		m.SourceIPs = []string{host}
	}
	return m
}

// beginAudit starts the audit event of an authenticated call (nil when
// the policy does not audit it): its user, the user it impersonates, what
// its request's ref addresses and, at Request level, its body.
func (g *gate) beginAudit(ctx context.Context, method string, req any) *audit.Request {
	c, _ := ctx.Value(callerKey{}).(caller)
	v := verb(method)
	attrs := audit.Attributes{User: c.authenticated, Verb: v, ResourceRequest: true}
	if r, ok := req.(interface{ GetRef() *apiv1.ResourceRef }); ok {
		ref := r.GetRef()
		attrs.APIGroup, attrs.APIVersion, attrs.Resource, attrs.Subresource = ref.GetGroup(), ref.GetVersion(), ref.GetResource(), ref.GetSubresource()
		attrs.Namespace, attrs.Name = ref.GetNamespace(), ref.GetName()
	}
	ev := g.auditor.Begin(&attrs, meta(ctx, method, v == "watch"))
	if c.impersonated {
		ev.SetImpersonatedUser(c.user)
	}
	if r, ok := req.(interface{ GetBody() *httpbody.HttpBody }); ok {
		ev.SetRequestObject(r.GetBody().GetData(), r.GetBody().GetContentType())
	}
	return ev
}

// auditRefusal audits a call tap refused (failed authentication or
// impersonation), which never reaches admit: its request is not read, so
// its event names no object.
func (g *gate) auditRefusal(ctx context.Context, method, id string, err error) {
	if g.auditor == nil {
		return
	}
	c, _ := ctx.Value(callerKey{}).(caller)
	attrs := audit.Attributes{User: c.authenticated, Verb: verb(method), ResourceRequest: true}
	m := meta(ctx, method, false)
	m.AuditID = id
	ev := g.auditor.Begin(&attrs, m)
	ev.CompleteStatus(apistatus.FromError(err))
}

// recordResponse passes a response message to the audit event.
func recordResponse(ev *audit.Request, m any) {
	if hb, ok := m.(*httpbody.HttpBody); ok {
		ev.ResponseHeader(http.StatusOK, hb.GetContentType())
		ev.ResponseBody(hb.GetData())
	}
}

// completeAudit writes the ResponseComplete stage of a call that returned
// resp (a unary call's response; nil for a stream, whose messages went
// through recordResponse) and err. A create answers 201, as over REST.
func completeAudit(ev *audit.Request, resp any, err error) {
	if ev == nil {
		return
	}
	if err != nil {
		ev.CompleteStatus(apistatus.FromError(err))
		return
	}
	code := http.StatusOK
	if ev.Verb() == "create" {
		code = http.StatusCreated
	}
	if hb, ok := resp.(*httpbody.HttpBody); ok {
		ev.ResponseHeader(code, hb.GetContentType())
		ev.ResponseBody(hb.GetData())
	}
	ev.Complete(code)
}
