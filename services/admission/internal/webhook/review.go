package webhook

import (
	"encoding/json"
	"errors"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	admissionv1beta1 "k8s.io/api/admission/v1beta1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	admitv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
)

// Review versions a webhook may accept (admissionReviewVersions).
const (
	reviewV1      = "v1"
	reviewV1beta1 = "v1beta1"
)

// reviewVersion picks the first of a webhook's admissionReviewVersions
// meridian speaks, as kube-apiserver does; "" when none.
func reviewVersion(versions []string) string {
	for _, v := range versions {
		if v == reviewV1 || v == reviewV1beta1 {
			return v
		}
	}
	return ""
}

// verdict is what a webhook answered.
type verdict struct {
	allowed          bool
	result           *metav1.Status
	patch            []byte // a JSONPatch; nil when none
	warnings         []string
	auditAnnotations map[string]string
}

// reviewRequest is the AdmissionRequest sent for req (object possibly
// mutated by earlier webhooks).
func reviewRequest(req *admitv1.AdmitRequest, object []byte) admissionv1.AdmissionRequest {
	k, r := req.GetKind(), req.GetResource()
	kind := metav1.GroupVersionKind{Group: k.GetGroup(), Version: k.GetVersion(), Kind: k.GetKind()}
	res := metav1.GroupVersionResource{Group: r.GetGroup(), Version: r.GetVersion(), Resource: r.GetResource()}
	dryRun := req.GetDryRun()
	u := req.GetUserInfo()
	ui := authenticationv1.UserInfo{Username: u.GetUsername(), UID: u.GetUid(), Groups: u.GetGroups()}
	if len(u.GetExtra()) > 0 {
		ui.Extra = map[string]authenticationv1.ExtraValue{}
		for key, v := range u.GetExtra() {
			ui.Extra[key] = v.GetValues()
		}
	}
	return admissionv1.AdmissionRequest{
		UID: types.UID(req.GetUid()), Kind: kind, Resource: res, SubResource: req.GetSubResource(),
		RequestKind: &kind, RequestResource: &res, RequestSubResource: req.GetSubResource(),
		Name: req.GetName(), Namespace: req.GetNamespace(), Operation: operation(req.GetOperation()), UserInfo: ui,
		Object: raw(object), OldObject: raw(req.GetOldObject()), DryRun: &dryRun, Options: raw(req.GetOptions()),
	}
}

func raw(data []byte) runtime.RawExtension {
	if len(data) == 0 {
		return runtime.RawExtension{}
	}
	return runtime.RawExtension{Raw: data}
}

func operation(op admitv1.Operation) admissionv1.Operation {
	switch op {
	case admitv1.Operation_OPERATION_CREATE:
		return admissionv1.Create
	case admitv1.Operation_OPERATION_UPDATE:
		return admissionv1.Update
	case admitv1.Operation_OPERATION_DELETE:
		return admissionv1.Delete
	default:
		return admissionv1.Connect
	}
}

// encodeReview is the AdmissionReview body of version (v1 or v1beta1).
func encodeReview(version string, r admissionv1.AdmissionRequest) ([]byte, error) {
	if version == reviewV1beta1 {
		b := admissionv1beta1.AdmissionRequest{
			UID: r.UID, Kind: r.Kind, Resource: r.Resource, SubResource: r.SubResource,
			RequestKind: r.RequestKind, RequestResource: r.RequestResource, RequestSubResource: r.RequestSubResource,
			Name: r.Name, Namespace: r.Namespace, Operation: admissionv1beta1.Operation(r.Operation), UserInfo: r.UserInfo,
			Object: r.Object, OldObject: r.OldObject, DryRun: r.DryRun, Options: r.Options,
		}
		return json.Marshal(admissionv1beta1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: admissionv1beta1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
			Request:  &b,
		})
	}
	return json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Request:  &r,
	})
}

// DecodeReview reads a webhook's AdmissionReview response of version
// (what it was sent), checked as kube-apiserver checks it: the same
// apiVersion and kind for v1, a response with the request's uid, and a
// patch only from a mutating webhook and only of type JSONPatch.
func DecodeReview(data []byte, version string, uid string, mutating bool) (verdict, error) {
	var tm metav1.TypeMeta
	if err := json.Unmarshal(data, &tm); err != nil {
		return verdict{}, fmt.Errorf("decoding the response: %w", err)
	}
	var resp *admissionv1.AdmissionResponse
	switch version {
	case reviewV1:
		if tm.APIVersion != admissionv1.SchemeGroupVersion.String() || tm.Kind != "AdmissionReview" {
			return verdict{}, fmt.Errorf("expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got %s, Kind=%s", tm.APIVersion, tm.Kind)
		}
		var r admissionv1.AdmissionReview
		if err := json.Unmarshal(data, &r); err != nil {
			return verdict{}, fmt.Errorf("decoding the response: %w", err)
		}
		resp = r.Response
	case reviewV1beta1:
		var r admissionv1beta1.AdmissionReview
		if err := json.Unmarshal(data, &r); err != nil {
			return verdict{}, fmt.Errorf("decoding the response: %w", err)
		}
		if r.Response != nil {
			b := r.Response
			resp = &admissionv1.AdmissionResponse{UID: b.UID, Allowed: b.Allowed, Result: b.Result, Patch: b.Patch,
				AuditAnnotations: b.AuditAnnotations, Warnings: b.Warnings}
			if b.PatchType != nil {
				pt := admissionv1.PatchType(*b.PatchType)
				resp.PatchType = &pt
			}
		}
	default:
		return verdict{}, fmt.Errorf("unsupported admissionReviewVersion %q", version)
	}
	if resp == nil {
		return verdict{}, errors.New("webhook response was absent")
	}
	if version == reviewV1 && string(resp.UID) != uid {
		return verdict{}, fmt.Errorf("expected response.uid=%q, got %q", uid, resp.UID)
	}
	v := verdict{allowed: resp.Allowed, result: resp.Result, warnings: resp.Warnings, auditAnnotations: resp.AuditAnnotations}
	if len(resp.Patch) > 0 {
		if !mutating {
			return verdict{}, errors.New("validating webhook may not return response.patch")
		}
		if resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
			if version == reviewV1 {
				return verdict{}, errors.New("webhook returned response.patch but not response.patchType=JSONPatch")
			}
		}
		v.patch = resp.Patch
	}
	return v, nil
}
