package frontend

import (
	"net/http"

	"github.com/meridian-cp/meridian/services/apigateway/internal/authn/serviceaccount"
	"github.com/meridian-cp/meridian/services/apigateway/internal/requestinfo"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// # Tokens
//
// The gateway serves, as kube-apiserver does: the TokenRequest
// subresource (POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token,
// `kubectl create token`), which needs "create" on serviceaccounts/token;
// TokenReview (POST /apis/authentication.k8s.io/v1/tokenreviews), which
// needs "create" on tokenreviews; and the service account issuer's OpenID
// discovery documents, which need "get" on their paths
// (system:service-account-issuer-discovery). Each is authorized like any
// request before it gets here. Nothing is stored.

// isTokenRequest reports whether info addresses a service account's token
// subresource.
func isTokenRequest(info requestinfo.Info) bool {
	return info.IsResourceRequest && info.APIGroup == "" && info.APIVersion == "v1" &&
		info.Resource == "serviceaccounts" && info.Subresource == "token"
}

// isTokenReview reports whether info addresses the TokenReview collection.
func isTokenReview(info requestinfo.Info) bool {
	return info.IsResourceRequest && info.APIGroup == authenticationv1.GroupName && info.APIVersion == "v1" && info.Resource == "tokenreviews"
}

// serveTokenRequest issues a token for the service account the URL names.
func (h *Handler) serveTokenRequest(w http.ResponseWriter, r *http.Request, info requestinfo.Info) {
	gr := schema.GroupResource{Resource: "serviceaccounts"}
	if h.cfg.ServiceAccounts == nil || info.Name == "" || info.Namespace == "" {
		writeStatus(w, notFound())
		return
	}
	if r.Method != http.MethodPost {
		writeStatus(w, apierrors.NewMethodNotSupported(gr, info.Verb).ErrStatus)
		return
	}
	h.serveReview(w, r, authenticationv1.SchemeGroupVersion.WithKind("TokenRequest"), &authenticationv1.TokenRequest{}, func(obj runtime.Object) error {
		return h.cfg.ServiceAccounts.Request(r.Context(), info.Namespace, info.Name, obj.(*authenticationv1.TokenRequest))
	})
}

// serveTokenReview authenticates the token a TokenReview names with every
// token authenticator, for the audiences it names (the API's when none),
// as kube-apiserver's TokenReview does. A token that does not
// authenticate is status.authenticated false, with an error that never
// quotes it.
func (h *Handler) serveTokenReview(w http.ResponseWriter, r *http.Request, info requestinfo.Info) {
	if info.Name != "" || info.Subresource != "" || info.Namespace != "" {
		writeStatus(w, notFound())
		return
	}
	if r.Method != http.MethodPost {
		writeStatus(w, apierrors.NewMethodNotSupported(schema.GroupResource{Group: authenticationv1.GroupName, Resource: "tokenreviews"}, info.Verb).ErrStatus)
		return
	}
	h.serveReview(w, r, authenticationv1.SchemeGroupVersion.WithKind("TokenReview"), &authenticationv1.TokenReview{}, func(obj runtime.Object) error {
		review := obj.(*authenticationv1.TokenReview)
		if review.Spec.Token == "" {
			return apierrors.NewInvalid(authenticationv1.SchemeGroupVersion.WithKind("TokenReview").GroupKind(), "",
				field.ErrorList{field.Required(field.NewPath("spec", "token"), "")})
		}
		u, audiences, ok, err := h.cfg.Authenticator.AuthenticateToken(review.Spec.Token, review.Spec.Audiences)
		review.Status = authenticationv1.TokenReviewStatus{Authenticated: ok, Audiences: audiences}
		if err != nil {
			review.Status.Error = err.Error()
		}
		if ok {
			review.Status.User = authenticationv1.UserInfo{Username: u.Name, UID: u.UID, Groups: u.Groups}
			if len(u.Extra) > 0 {
				review.Status.User.Extra = make(map[string]authenticationv1.ExtraValue, len(u.Extra))
				for k, v := range u.Extra {
					review.Status.User.Extra[k] = v
				}
			}
		}
		return nil
	})
}

// serveIssuerDiscovery serves the OpenID discovery documents of the
// service account issuer (OpenIDConfigPath and JWKSPath).
func (h *Handler) serveIssuerDiscovery(w http.ResponseWriter, r *http.Request) {
	t := h.cfg.ServiceAccounts
	path := r.URL.Path
	if t == nil || !t.DiscoveryServed() || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		writeStatus(w, notFound())
		return
	}
	var body []byte
	if path == serviceaccount.OpenIDConfigPath {
		var err error
		if body, err = t.OpenIDConfiguration(); err != nil {
			writeStatus(w, apierrors.NewInternalError(err).ErrStatus)
			return
		}
		w.Header().Set("Content-Type", "application/json")
	} else {
		body = t.JWKS()
		w.Header().Set("Content-Type", serviceaccount.JWKSMediaType)
	}
	// As kube-apiserver: the documents change only with a key rotation.
	w.Header().Set("Cache-Control", "public, max-age=3600")
	_, _ = w.Write(body)
}

// notFound is kube-apiserver's 404 for a path it does not serve.
func notFound() metav1.Status {
	return metav1.Status{Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
		Message: "the server could not find the requested resource", Details: &metav1.StatusDetails{}}
}
