package frontend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"

	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/services/apigateway/internal/authz"
	"github.com/meridian-cp/meridian/services/apigateway/internal/requestinfo"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// # Access reviews
//
// authorization.k8s.io/v1's reviews ask the authorizer a question and
// store nothing, as kube-apiserver's: SubjectAccessReview (may this user
// do this?), LocalSubjectAccessReview (the same, in one namespace),
// SelfSubjectAccessReview (may I? `kubectl auth can-i`) and
// SelfSubjectRulesReview (what may I do in this namespace? `kubectl auth
// can-i --list`). They are served as create-only resources; creating one
// needs the "create" verb on it like any other create (system:basic-user
// grants the self reviews to everyone authenticated).

// accessReviews are the served reviews by resource name.
var accessReviews = map[string]struct {
	kind       string
	namespaced bool
	new        func() runtime.Object
}{
	"subjectaccessreviews":      {"SubjectAccessReview", false, func() runtime.Object { return &authorizationv1.SubjectAccessReview{} }},
	"selfsubjectaccessreviews":  {"SelfSubjectAccessReview", false, func() runtime.Object { return &authorizationv1.SelfSubjectAccessReview{} }},
	"localsubjectaccessreviews": {"LocalSubjectAccessReview", true, func() runtime.Object { return &authorizationv1.LocalSubjectAccessReview{} }},
	"selfsubjectrulesreviews":   {"SelfSubjectRulesReview", false, func() runtime.Object { return &authorizationv1.SelfSubjectRulesReview{} }},
}

// reviewCodec encodes and decodes the review kinds, and the other
// authentication.k8s.io objects the gateway answers (TokenRequest).
type reviewCodec struct {
	scheme *runtime.Scheme
	json   *json.Serializer
	yaml   *json.Serializer
	proto  *protobuf.Serializer
}

func newReviewCodec() (*reviewCodec, error) {
	s := runtime.NewScheme()
	if err := authorizationv1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("frontend: %w", err)
	}
	if err := authenticationv1.AddToScheme(s); err != nil {
		return nil, fmt.Errorf("frontend: %w", err)
	}
	return &reviewCodec{
		scheme: s,
		json:   json.NewSerializerWithOptions(json.DefaultMetaFactory, s, s, json.SerializerOptions{}),
		yaml:   json.NewSerializerWithOptions(json.DefaultMetaFactory, s, s, json.SerializerOptions{Yaml: true}),
		proto:  protobuf.NewSerializer(s, s),
	}, nil
}

func (c *reviewCodec) serializer(mediaType string) runtime.Serializer {
	switch mediaType {
	case negotiation.YAML:
		return c.yaml
	case negotiation.Protobuf:
		return c.proto
	}
	return c.json
}

// isAccessReview reports whether info addresses a review collection.
func isAccessReview(info requestinfo.Info) bool {
	_, ok := accessReviews[info.Resource]
	return ok && info.IsResourceRequest && info.APIGroup == authorizationv1.GroupName && info.APIVersion == "v1"
}

// serveAccessReview answers the create of a review; u is who asks (after
// impersonation), already authorized to create it.
func (h *Handler) serveAccessReview(w http.ResponseWriter, r *http.Request, info requestinfo.Info, u identity.User) {
	review := accessReviews[info.Resource]
	gr := schema.GroupResource{Group: authorizationv1.GroupName, Resource: info.Resource}
	if info.Name != "" || info.Subresource != "" || review.namespaced != (info.Namespace != "") {
		writeStatus(w, notFound())
		return
	}
	if r.Method != http.MethodPost {
		writeStatus(w, apierrors.NewMethodNotSupported(gr, info.Verb).ErrStatus)
		return
	}
	h.serveReview(w, r, authorizationv1.SchemeGroupVersion.WithKind(review.kind), review.new(), func(obj runtime.Object) error {
		return h.review(r.Context(), obj, info.Namespace, u)
	})
}

// serveReview decodes an object of gvk (a review, a TokenRequest) from the
// body into into, has fill answer it, and writes it back, 201 Created, in
// the media type the client accepts.
func (h *Handler) serveReview(w http.ResponseWriter, r *http.Request, gvk schema.GroupVersionKind, into runtime.Object, fill func(runtime.Object) error) {
	out, ok := negotiation.Negotiate(r.Header.Get("Accept"), negotiation.Writes)
	if !ok {
		writeStatus(w, apierrors.NewGenericServerResponse(http.StatusNotAcceptable, "", schema.GroupResource{}, "",
			"none of the requested media types is served", 0, false).ErrStatus)
		return
	}
	obj, err := h.decodeReview(r, gvk, into)
	if err == nil {
		err = fill(obj)
	}
	if err != nil {
		writeStatus(w, toStatus(err))
		return
	}
	var buf bytes.Buffer
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	if err := h.reviews.serializer(out.Type).Encode(obj, &buf); err != nil {
		writeStatus(w, apierrors.NewInternalError(err).ErrStatus)
		return
	}
	w.Header().Set("Content-Type", out.Type)
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write(buf.Bytes())
}

// readReviewBody reads the (bounded) request body and its media type.
func (h *Handler) readReviewBody(r *http.Request) (string, []byte, error) {
	ct, ok := negotiation.ContentType(r.Header.Get("Content-Type"))
	if !ok {
		ct = negotiation.JSON
	}
	if ct != negotiation.JSON && ct != negotiation.YAML && ct != negotiation.Protobuf {
		return "", nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "", schema.GroupResource{}, "",
			"the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf", 0, false)
	}
	data, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, h.cfg.MaxRequestBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return "", nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", h.cfg.MaxRequestBytes))
		}
		return "", nil, apierrors.NewBadRequest(fmt.Sprintf("reading the request body: %v", err))
	}
	return ct, data, nil
}

// decodeReview reads the request body into into, an object of gvk.
func (h *Handler) decodeReview(r *http.Request, gvk schema.GroupVersionKind, into runtime.Object) (runtime.Object, error) {
	ct, data, err := h.readReviewBody(r)
	if err != nil {
		return nil, err
	}
	return h.decodeBody(data, ct, gvk, into)
}

// decodeBody decodes data, of media type ct, into into, an object of gvk.
func (h *Handler) decodeBody(data []byte, ct string, gvk schema.GroupVersionKind, into runtime.Object) (runtime.Object, error) {
	obj, got, err := h.reviews.serializer(ct).Decode(data, &gvk, into)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the object provided is unrecognized or malformed: %v", err))
	}
	if *got != gvk {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the body is a %s, but this endpoint serves %s", got, gvk))
	}
	return obj, nil
}

// review fills the status of a decoded review, as kube-apiserver's review
// storage does: validated first (422), then asked of the authorizer.
func (h *Handler) review(ctx context.Context, obj runtime.Object, namespace string, u identity.User) error {
	az := h.cfg.Authorizer
	switch rv := obj.(type) {
	case *authorizationv1.SubjectAccessReview:
		errs := validateReviewSpec(rv.Spec, field.NewPath("spec"))
		if !emptyMeta(rv.ObjectMeta) {
			errs = append(errs, field.Invalid(field.NewPath("metadata"), rv.ObjectMeta, `must be empty`))
		}
		if len(errs) > 0 {
			return apierrors.NewInvalid(authorizationv1.SchemeGroupVersion.WithKind("SubjectAccessReview").GroupKind(), "", errs)
		}
		rv.Status = decide(ctx, az, specUser(rv.Spec), rv.Spec.ResourceAttributes, rv.Spec.NonResourceAttributes)
	case *authorizationv1.LocalSubjectAccessReview:
		if rv.Namespace == "" {
			rv.Namespace = namespace
		}
		errs := validateReviewSpec(rv.Spec, field.NewPath("spec"))
		meta := rv.ObjectMeta
		meta.Namespace = ""
		if !emptyMeta(meta) {
			errs = append(errs, field.Invalid(field.NewPath("metadata"), rv.ObjectMeta, `must be empty except for namespace`))
		}
		if rv.Spec.ResourceAttributes != nil && rv.Spec.ResourceAttributes.Namespace != rv.Namespace {
			errs = append(errs, field.Invalid(field.NewPath("spec.resourceAttributes.namespace"), rv.Spec.ResourceAttributes.Namespace, `must match metadata.namespace`))
		}
		if rv.Spec.NonResourceAttributes != nil {
			errs = append(errs, field.Invalid(field.NewPath("spec.nonResourceAttributes"), rv.Spec.NonResourceAttributes, `disallowed on this kind of request`))
		}
		if len(errs) > 0 {
			return apierrors.NewInvalid(authorizationv1.SchemeGroupVersion.WithKind("LocalSubjectAccessReview").GroupKind(), "", errs)
		}
		if rv.Namespace != namespace {
			return apierrors.NewBadRequest(fmt.Sprintf("spec.resourceAttributes.namespace must match namespace: %v", namespace))
		}
		rv.Status = decide(ctx, az, specUser(rv.Spec), rv.Spec.ResourceAttributes, nil)
	case *authorizationv1.SelfSubjectAccessReview:
		var errs field.ErrorList
		p := field.NewPath("spec")
		if rv.Spec.ResourceAttributes != nil && rv.Spec.NonResourceAttributes != nil {
			errs = append(errs, field.Invalid(p.Child("nonResourceAttributes"), rv.Spec.NonResourceAttributes, `cannot be specified in combination with resourceAttributes`))
		}
		if rv.Spec.ResourceAttributes == nil && rv.Spec.NonResourceAttributes == nil {
			errs = append(errs, field.Invalid(p.Child("resourceAttributes"), rv.Spec.NonResourceAttributes, `exactly one of nonResourceAttributes or resourceAttributes must be specified`))
		}
		if len(errs) > 0 {
			return apierrors.NewInvalid(authorizationv1.SchemeGroupVersion.WithKind("SelfSubjectAccessReview").GroupKind(), "", errs)
		}
		rv.Status = decide(ctx, az, u, rv.Spec.ResourceAttributes, rv.Spec.NonResourceAttributes)
	case *authorizationv1.SelfSubjectRulesReview:
		if rv.Spec.Namespace == "" {
			return apierrors.NewBadRequest("no namespace on request")
		}
		resourceRules, nonResourceRules, incomplete, err := az.RulesFor(ctx, &user.DefaultInfo{Name: u.Name, UID: u.UID, Groups: u.Groups, Extra: u.Extra}, rv.Spec.Namespace)
		rv.Status = authorizationv1.SubjectRulesReviewStatus{Incomplete: incomplete, ResourceRules: []authorizationv1.ResourceRule{}, NonResourceRules: []authorizationv1.NonResourceRule{}}
		for _, rule := range resourceRules {
			rv.Status.ResourceRules = append(rv.Status.ResourceRules, authorizationv1.ResourceRule{
				Verbs: rule.GetVerbs(), APIGroups: rule.GetAPIGroups(), Resources: rule.GetResources(), ResourceNames: rule.GetResourceNames(),
			})
		}
		for _, rule := range nonResourceRules {
			rv.Status.NonResourceRules = append(rv.Status.NonResourceRules, authorizationv1.NonResourceRule{
				Verbs: rule.GetVerbs(), NonResourceURLs: rule.GetNonResourceURLs(),
			})
		}
		if err != nil {
			rv.Status.EvaluationError = err.Error()
		}
	}
	return nil
}

// validateReviewSpec checks a (Local)SubjectAccessReview's spec as
// kube-apiserver's validation does.
func validateReviewSpec(spec authorizationv1.SubjectAccessReviewSpec, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if spec.ResourceAttributes != nil && spec.NonResourceAttributes != nil {
		errs = append(errs, field.Invalid(p.Child("nonResourceAttributes"), spec.NonResourceAttributes, `cannot be specified in combination with resourceAttributes`))
	}
	if spec.ResourceAttributes == nil && spec.NonResourceAttributes == nil {
		errs = append(errs, field.Invalid(p.Child("resourceAttributes"), spec.NonResourceAttributes, `exactly one of nonResourceAttributes or resourceAttributes must be specified`))
	}
	if spec.User == "" && len(spec.Groups) == 0 {
		errs = append(errs, field.Invalid(p.Child("user"), spec.User, `at least one of user or group must be specified`))
	}
	return errs
}

// emptyMeta: a review's metadata may hold nothing but managed fields.
func emptyMeta(m metav1.ObjectMeta) bool {
	m.ManagedFields = nil
	return reflect.DeepEqual(m, metav1.ObjectMeta{})
}

// specUser is the user a SubjectAccessReview asks about, as its spec
// names it: no group is added.
func specUser(spec authorizationv1.SubjectAccessReviewSpec) identity.User {
	u := identity.User{Name: spec.User, UID: spec.UID, Groups: spec.Groups}
	if len(spec.Extra) > 0 {
		u.Extra = make(map[string][]string, len(spec.Extra))
		for k, v := range spec.Extra {
			u.Extra[k] = v
		}
	}
	return u
}

// decide asks az about u and the review's attributes (a version left
// empty means every version, as kube-apiserver reads it).
func decide(ctx context.Context, az authz.Authorizer, u identity.User, res *authorizationv1.ResourceAttributes, nonRes *authorizationv1.NonResourceAttributes) authorizationv1.SubjectAccessReviewStatus {
	a := authz.Attributes{User: u}
	if res != nil {
		a = authz.Attributes{User: u, Verb: res.Verb, ResourceRequest: true, APIGroup: res.Group, APIVersion: res.Version,
			Resource: res.Resource, Subresource: res.Subresource, Namespace: res.Namespace, Name: res.Name}
		if a.APIVersion == "" {
			a.APIVersion = "*"
		}
	} else if nonRes != nil {
		a.Verb, a.Path = nonRes.Verb, nonRes.Path
	}
	decision, reason, err := az.Authorize(ctx, a.Record())
	st := authorizationv1.SubjectAccessReviewStatus{
		Allowed: decision == authorizer.DecisionAllow,
		Denied:  decision == authorizer.DecisionDeny,
		Reason:  reason,
	}
	if err != nil {
		st.EvaluationError = err.Error()
	}
	return st
}
