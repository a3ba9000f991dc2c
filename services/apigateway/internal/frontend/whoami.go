package frontend

import (
	"encoding/json"
	"net/http"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// selfSubjectReviewPath is the collection of authentication.k8s.io/v1
// SelfSubjectReviews, which `kubectl auth whoami` creates to learn who the
// server takes it for.
const selfSubjectReviewPath = "/apis/authentication.k8s.io/v1/selfsubjectreviews"

// selfSubjectReviewRoute labels SelfSubjectReview creates in the metrics.
var selfSubjectReviewRoute = route{set: true, group: authenticationv1.GroupName, version: "v1",
	resource: "selfsubjectreviews", scope: "resource", component: "apiserver"}

// serveSelfSubjectReview answers the create of a SelfSubjectReview, as
// kube-apiserver does, with the caller as the request was authenticated
// and impersonated: its user name, uid, groups and extra attributes. The
// review holds nothing else, so the request body is not read; nothing is
// stored.
func serveSelfSubjectReview(w http.ResponseWriter, r *http.Request, u identity.User) {
	if r.Method != http.MethodPost {
		writeStatus(w, apierrors.NewMethodNotSupported(schema.GroupResource{Group: authenticationv1.GroupName, Resource: "selfsubjectreviews"}, r.Method).ErrStatus)
		return
	}
	if _, ok := negotiation.Negotiate(r.Header.Get("Accept"), negotiation.Options{Types: []string{negotiation.JSON}}); !ok {
		writeStatus(w, apierrors.NewGenericServerResponse(http.StatusNotAcceptable, "", schema.GroupResource{}, "",
			"none of the requested media types is served: "+negotiation.JSON+" is", 0, false).ErrStatus)
		return
	}
	review := authenticationv1.SelfSubjectReview{}
	review.APIVersion, review.Kind = authenticationv1.SchemeGroupVersion.String(), "SelfSubjectReview"
	review.Status.UserInfo = authenticationv1.UserInfo{Username: u.Name, UID: u.UID, Groups: u.Groups}
	if len(u.Extra) > 0 {
		review.Status.UserInfo.Extra = make(map[string]authenticationv1.ExtraValue, len(u.Extra))
		for k, v := range u.Extra {
			review.Status.UserInfo.Extra[k] = v
		}
	}
	data, err := json.Marshal(review)
	if err != nil {
		writeStatus(w, apierrors.NewInternalError(err).ErrStatus)
		return
	}
	w.Header().Set("Content-Type", negotiation.JSON)
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(data)
}
