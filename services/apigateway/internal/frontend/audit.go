package frontend

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/services/apigateway/internal/audit"
	"github.com/meridian-cp/meridian/services/apigateway/internal/requestinfo"
)

// auditIDHeader is the header naming a request's audit event.
const auditIDHeader = "Audit-Id"

// setAuditID gives the response the request's Audit-Id, as kube-apiserver
// does on every response: the client's own when it sent one, else a new
// UUID.
func setAuditID(w http.ResponseWriter, r *http.Request) string {
	id := r.Header.Get(auditIDHeader)
	if id == "" {
		id = uuid.NewString()
	}
	w.Header().Set(auditIDHeader, id)
	return id
}

// beginAudit starts the audit event of a request by u (the authenticated
// user, before impersonation; empty when authentication failed), or
// returns nil when the policy does not audit it.
func (h *Handler) beginAudit(r *http.Request, info requestinfo.Info, u identity.User, id string, received time.Time) *audit.Request {
	attrs := audit.Attributes{
		User: u, Verb: info.Verb, ResourceRequest: info.IsResourceRequest, Path: info.Path,
		APIGroup: info.APIGroup, APIVersion: info.APIVersion, Resource: info.Resource,
		Subresource: info.Subresource, Namespace: info.Namespace, Name: info.Name,
	}
	return h.cfg.Auditor.Begin(&attrs, audit.Meta{
		AuditID: id, RequestURI: r.URL.RequestURI(), UserAgent: r.Header.Get("User-Agent"),
		SourceIPs: sourceIPs(r), Received: received, LongRunning: info.Verb == "watch",
	})
}

// sourceIPs are the client's addresses as kube-apiserver lists them: the
// X-Forwarded-For chain, X-Real-Ip, then the connection's peer.
func sourceIPs(r *http.Request) []string {
	var ips []string
	add := func(s string) {
		s = strings.TrimSpace(s)
		if net.ParseIP(s) == nil {
			return
		}
		for _, ip := range ips {
			if ip == s {
				return
			}
		}
		ips = append(ips, s)
	}
	for _, s := range strings.Split(r.Header.Get("X-Forwarded-For"), ",") {
		add(s)
	}
	add(r.Header.Get("X-Real-Ip"))
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	add(host)
	return ips
}

// auditWriter passes the response's header and body to the audit event
// (its status, its object at RequestResponse, its ResponseStarted stage
// for a watch). It must sit inside any compression, to see the bytes the
// handler wrote. It forwards Flush and Hijack, which watches need.
type auditWriter struct {
	http.ResponseWriter
	ev          *audit.Request
	wroteHeader bool
}

func (a *auditWriter) WriteHeader(code int) {
	if !a.wroteHeader {
		a.wroteHeader = true
		a.ev.ResponseHeader(code, a.Header().Get("Content-Type"))
	}
	a.ResponseWriter.WriteHeader(code)
}

func (a *auditWriter) Write(b []byte) (int, error) {
	if !a.wroteHeader {
		a.WriteHeader(http.StatusOK)
	}
	a.ev.ResponseBody(b)
	return a.ResponseWriter.Write(b)
}

// Flush sends buffered data to the client.
func (a *auditWriter) Flush() {
	if !a.wroteHeader {
		a.WriteHeader(http.StatusOK)
	}
	if f, ok := a.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack takes over the connection.
func (a *auditWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := a.ResponseWriter.(http.Hijacker); ok {
		return h.Hijack()
	}
	return nil, nil, errors.New("frontend: hijack not supported")
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (a *auditWriter) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// wrapInsideAudit applies wrap (compression) to w beneath its
// auditWriter, if it has one, so that the audit event records what the
// handler wrote rather than its compressed form.
func wrapInsideAudit(w http.ResponseWriter, wrap func(http.ResponseWriter) http.ResponseWriter) http.ResponseWriter {
	if aw, ok := w.(*auditWriter); ok {
		return &auditWriter{ResponseWriter: wrap(aw.ResponseWriter), ev: aw.ev, wroteHeader: aw.wroteHeader}
	}
	return wrap(w)
}
