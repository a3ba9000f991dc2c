package frontend

import (
	"net/http"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/services/apigateway/internal/audit"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authz"
	"github.com/meridian-cp/meridian/services/apigateway/internal/requestinfo"
)

// authorize asks the authorizer whether u may make request r (described
// by info), and answers kube-apiserver's 403 when not. It runs for every
// request, health and discovery included, before anything is read of the
// request's body and before flow control is asked for seats: a refused
// request costs one policy lookup.
func (h *Handler) authorize(w http.ResponseWriter, r *http.Request, info requestinfo.Info, u identity.User) bool {
	a := authz.FromRequest(u, info, r.URL.RawQuery)
	var ev *audit.Request
	if h.cfg.Auditor != nil {
		ev = audit.FromContext(r.Context())
	}
	var ok bool
	var reason string
	if ev != nil {
		// An audited request's event names the grant that allowed it.
		ok, reason = authz.Explain(r.Context(), h.cfg.Authorizer, a)
		audit.AnnotateDecision(ev, ok, reason)
	} else {
		ok, reason = h.cfg.Authorizer.Allowed(r.Context(), a)
	}
	if !ok {
		writeStatus(w, authz.Forbidden(a, reason).ErrStatus)
		return false
	}
	return true
}
