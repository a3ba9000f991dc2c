package resources

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/google/uuid"
	"github.com/meridian-cp/meridian/lib/identity"
	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	"github.com/meridian-cp/meridian/lib/telemetry"
	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/audit"
	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

const (
	apiv1Create = admissionv1.Operation_OPERATION_CREATE
	apiv1Update = admissionv1.Operation_OPERATION_UPDATE
	apiv1Delete = admissionv1.Operation_OPERATION_DELETE
)

// Scoper is an optional interface of Config.Admission: a client that knows
// which requests any admission policy could match
// (admissionclient.Client). Writes it reports out of scope are admitted
// without a call; see package admissionclient for when a new policy starts
// to apply.
type Scoper interface {
	InScope(op admissionv1.Operation, group, resource, subresource string) bool
}

// admit asks the admission service about a write. obj is nil for a delete,
// old nil for a create. A denial becomes the Status the policy chose. A
// write that no policy can match (see Scoper) is admitted without a call,
// and without encoding its objects.
func (s *Server) admit(ctx context.Context, res *registry.Resource, ref *apiv1.ResourceRef, obj, old runtime.Object, op admissionv1.Operation, dryRun bool) error {
	if s.cfg.Admission == nil {
		return nil
	}
	ctx, span := telemetry.StartSpan(ctx, telemetry.ScopeGateway, "admission")
	defer span.End()
	if sc, ok := s.cfg.Admission.(Scoper); ok && !sc.InScope(op, res.GVR.Group, res.GVR.Resource, ref.GetSubresource()) {
		if span.IsRecording() {
			// No policy can match: admitted without a call.
			span.SetAttributes(attribute.Bool("meridian.admission.in_scope", false))
		}
		return nil
	}
	u := user(ctx)
	req := &admissionv1.AdmitRequest{
		Uid:         uuid.NewString(),
		Operation:   op,
		Kind:        &admissionv1.GroupVersionKind{Group: res.GVR.Group, Version: res.GVR.Version, Kind: res.Kind},
		Resource:    &admissionv1.GroupVersionResource{Group: res.GVR.Group, Version: res.GVR.Version, Resource: res.GVR.Resource},
		SubResource: ref.GetSubresource(),
		Namespace:   ref.GetNamespace(),
		Name:        ref.GetName(),
		UserInfo:    userInfo(u),
		DryRun:      dryRun,
	}
	var err error
	if obj != nil {
		if acc, aerr := meta.Accessor(obj); aerr == nil && req.Name == "" {
			req.Name = acc.GetName()
		}
		if req.Object, err = s.cfg.Codec.EncodeToBytes(obj, negotiation.JSON); err != nil {
			return apierrors.NewInternalError(err)
		}
	}
	if old != nil {
		if req.OldObject, err = s.cfg.Codec.EncodeToBytes(old, negotiation.JSON); err != nil {
			return apierrors.NewInternalError(err)
		}
	}
	resp, err := s.cfg.Admission.Admit(identity.AppendToOutgoing(ctx, u), req)
	if err != nil {
		return admissionError(err)
	}
	// The policies' audit annotations go on the request's audit event,
	// whether they admitted it or not; their warnings to the client.
	audit.AddAnnotations(ctx, resp.GetAuditAnnotations())
	if w := resp.GetWarnings(); len(w) > 0 {
		warn(ctx, w...)
	}
	if resp.GetAllowed() {
		if len(resp.GetPatch()) > 0 && obj != nil {
			return s.applyAdmissionPatch(res, req.Object, resp.GetPatch(), obj, old)
		}
		return nil
	}
	st := resp.GetStatus()
	code := st.GetCode()
	if code == 0 {
		code = 403
	}
	reason := metav1.StatusReason(st.GetReason())
	if reason == "" {
		reason = metav1.StatusReasonForbidden
	}
	// The message is whole as the admission service words it (a policy's
	// "<resource> "<name>" is forbidden: ValidatingAdmissionPolicy ...",
	// a webhook's "admission webhook ... denied the request: ...").
	details := &metav1.StatusDetails{Name: req.Name, Group: res.GVR.Group, Kind: res.GVR.Resource}
	// A policy's denial is also its one cause, without the prefix, as
	// kube-apiserver reports it (kubectl prints causes of 422s).
	gr := schema.GroupResource{Group: res.GVR.Group, Resource: res.GVR.Resource}
	if msg, ok := strings.CutPrefix(st.GetMessage(), fmt.Sprintf("%s %q is forbidden: ", gr.String(), req.Name)); ok {
		details.Causes = []metav1.StatusCause{{Message: msg}}
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: code, Reason: reason,
		Message: st.GetMessage(), Details: details,
	}}
}

// admissionRetryAfter is the Retry-After of a write refused because the
// admission service was unreachable: about a restart.
const admissionRetryAfter = 2

// admissionError is the error a client gets when the admission call
// failed. An unreachable service (UNAVAILABLE, after the client's own
// wait) is 503 ServiceUnavailable with Retry-After: the write was not
// sent to the store, so sending it again is safe. Anything else is an
// internal error.
func admissionError(err error) error {
	if st := status.Convert(err); st.Code() == codes.Unavailable {
		return &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusServiceUnavailable, Reason: metav1.StatusReasonServiceUnavailable,
			Message: "the admission service is unavailable; the write was not applied: " + st.Message(),
			Details: &metav1.StatusDetails{RetryAfterSeconds: admissionRetryAfter},
		}}
	}
	return apierrors.NewInternalError(fmt.Errorf("admission: %w", err))
}

// applyAdmissionPatch applies the mutating policies' JSON patch to the
// object sent (encoded, its JSON) and puts the result in obj, which is
// validated again (old is nil on a create): a mutation cannot store what
// the kind's validation refuses.
func (s *Server) applyAdmissionPatch(res *registry.Resource, encoded, patch []byte, obj, old runtime.Object) error {
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("admission: the patch does not decode: %w", err))
	}
	patched, err := p.Apply(encoded)
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("admission: applying the patch: %w", err))
	}
	out := res.New()
	if err := s.cfg.Codec.Decode(patched, negotiation.JSON, res.GVK(), out); err != nil {
		return apierrors.NewInternalError(fmt.Errorf("admission: the patched object does not decode: %w", err))
	}
	reflect.ValueOf(obj).Elem().Set(reflect.ValueOf(out).Elem())
	acc, _ := meta.Accessor(obj)
	var errs field.ErrorList
	if old == nil {
		errs = res.Strategy.Validate(obj)
	} else {
		errs = res.Strategy.ValidateUpdate(obj, old)
	}
	if len(errs) > 0 {
		return apierrors.NewInvalid(res.GVK().GroupKind(), acc.GetName(), errs)
	}
	return nil
}

func userInfo(u identity.User) *admissionv1.UserInfo {
	out := &admissionv1.UserInfo{Username: u.Name, Uid: u.UID, Groups: u.Groups}
	if len(u.Extra) > 0 {
		out.Extra = map[string]*admissionv1.ExtraValue{}
		for k, v := range u.Extra {
			out.Extra[k] = &admissionv1.ExtraValue{Values: v}
		}
	}
	return out
}
