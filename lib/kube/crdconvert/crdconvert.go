// Package crdconvert converts custom resources between the versions of
// their CustomResourceDefinition as kube-apiserver does
// (apiextensions-apiserver's conversion package, whose server-side
// plumbing meridian does not import):
//
//   - strategy None: only apiVersion changes;
//   - strategy Webhook: the objects not already at the desired version go
//     to the CRD's conversion webhook in one ConversionReview (the first
//     of the CRD's conversionReviewVersions meridian speaks: v1 or
//     v1beta1), over HTTPS through lib/kube/webhook with the CRD's
//     caBundle. The response is checked as upstream checks it: for v1 its
//     apiVersion and kind and the request's uid; a result other than
//     Success fails with the webhook's message; as many objects as were
//     sent; each of the desired apiVersion, the same kind, name,
//     namespace and uid as its original. Of the converted metadata only
//     labels and annotations are kept (validated as on a write);
//     everything else of metadata is the original's.
//
// Errors read as kube-apiserver's ("conversion webhook for <gvk> failed:
// …"); the caller serves them as 500 InternalError, so a dead or slow
// webhook costs a request at most the converter's timeout, never a hang.
package crdconvert

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/webhook"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// DefaultTimeout bounds a conversion webhook call: kube-apiserver's
// timeout of every webhook request (a CRD's conversion has no
// timeoutSeconds of its own).
const DefaultTimeout = webhook.MaxTimeout

// Converter converts custom resources. It is safe for concurrent use.
type Converter struct {
	client  *webhook.Client
	timeout time.Duration
}

// New returns a Converter calling webhooks through client, each call
// bounded by timeout (0: DefaultTimeout). A nil client converts only
// CRDs with strategy None; a Webhook CRD's conversion then fails.
func New(client *webhook.Client, timeout time.Duration) *Converter {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Converter{client: client, timeout: timeout}
}

// NeedsWebhook reports whether converting crd's objects between versions
// calls a webhook.
func NeedsWebhook(crd *apiextensionsv1.CustomResourceDefinition) bool {
	c := crd.Spec.Conversion
	return c != nil && c.Strategy == apiextensionsv1.WebhookConverter
}

// Convert converts objs, custom resources of crd, to version (of crd's
// group) in place: each either already is at that version, or gets the
// converted object. On error no object has been changed.
func (c *Converter) Convert(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition, objs []*unstructured.Unstructured, version string) error {
	gv := schema.GroupVersion{Group: crd.Spec.Group, Version: version}
	apiVersion := gv.String()
	var todo []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetAPIVersion() != apiVersion {
			todo = append(todo, o)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	if !NeedsWebhook(crd) {
		for _, o := range todo {
			o.SetAPIVersion(apiVersion)
		}
		return nil
	}
	gvk := todo[0].GroupVersionKind()
	converted, err := c.callWebhook(ctx, crd, todo, apiVersion)
	if err != nil {
		return fmt.Errorf("conversion webhook for %v failed: %w", gvk, err)
	}
	for i, o := range todo {
		if err := checkConverted(o, converted[i], gv); err != nil {
			if len(todo) > 1 {
				return fmt.Errorf("conversion webhook for %v returned invalid converted object at index %v: %w", gvk, i, err)
			}
			return fmt.Errorf("conversion webhook for %v returned invalid object: %w", gvk, err)
		}
	}
	for i, o := range todo {
		o.Object = converted[i].Object
	}
	return nil
}

// reviewVersion is the ConversionReview version to speak: the first of
// the CRD's conversionReviewVersions meridian knows, as upstream picks.
func reviewVersion(crd *apiextensionsv1.CustomResourceDefinition) (string, error) {
	for _, v := range crd.Spec.Conversion.Webhook.ConversionReviewVersions {
		if v == "v1" || v == "v1beta1" {
			return v, nil
		}
	}
	return "", errors.New("no supported conversion review versions")
}

// review is a ConversionReview of either version: v1 and v1beta1 have
// the same fields.
type review struct {
	APIVersion string                             `json:"apiVersion"`
	Kind       string                             `json:"kind"`
	Request    *apiextensionsv1.ConversionRequest `json:"request,omitempty"`
	Response   *struct {
		UID              types.UID         `json:"uid"`
		ConvertedObjects []json.RawMessage `json:"convertedObjects"`
		Result           metav1.Status     `json:"result"`
	} `json:"response,omitempty"`
}

// callWebhook sends objs to crd's webhook and returns the objects it
// converted, as many as were sent (not yet checked against them).
func (c *Converter) callWebhook(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition, objs []*unstructured.Unstructured, apiVersion string) ([]*unstructured.Unstructured, error) {
	conv := crd.Spec.Conversion
	if conv.Webhook == nil || conv.Webhook.ClientConfig == nil {
		return nil, errors.New("the CRD has no webhook client config")
	}
	if c.client == nil {
		return nil, errors.New("conversion webhooks are not configured on this server")
	}
	rv, err := reviewVersion(crd)
	if err != nil {
		return nil, err
	}
	uid := uuid.NewUUID()
	req := review{APIVersion: apiextensionsv1.GroupName + "/" + rv, Kind: "ConversionReview", Request: &apiextensionsv1.ConversionRequest{UID: uid, DesiredAPIVersion: apiVersion}}
	for _, o := range objs {
		raw, err := o.MarshalJSON()
		if err != nil {
			return nil, err
		}
		req.Request.Objects = append(req.Request.Objects, runtime.RawExtension{Raw: raw})
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	data, err := c.client.Post(ctx, clientConfig(conv.Webhook.ClientConfig), c.timeout, body)
	if err != nil {
		return nil, err
	}
	var resp review
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, fmt.Errorf("decoding the webhook's response: %w", err)
	}
	if rv == "v1" && (resp.APIVersion != req.APIVersion || resp.Kind != req.Kind) {
		return nil, fmt.Errorf("expected webhook response of %v, got %v", schema.FromAPIVersionAndKind(req.APIVersion, req.Kind), schema.FromAPIVersionAndKind(resp.APIVersion, resp.Kind))
	}
	if resp.Response == nil {
		return nil, errors.New("no response provided")
	}
	if rv == "v1" && resp.Response.UID != uid {
		return nil, fmt.Errorf("expected response.uid=%q, got %q", uid, resp.Response.UID)
	}
	if st := resp.Response.Result; st.Status != metav1.StatusSuccess {
		if st.Message != "" {
			return nil, errors.New(st.Message)
		}
		return nil, fmt.Errorf("response.result.status was '%s', not 'Success'", st.Status)
	}
	if got := len(resp.Response.ConvertedObjects); got != len(objs) {
		if len(objs) == 1 && got == 0 {
			return nil, errors.New("no objects returned")
		}
		return nil, fmt.Errorf("returned %d objects, expected %d", got, len(objs))
	}
	out := make([]*unstructured.Unstructured, len(objs))
	for i, raw := range resp.Response.ConvertedObjects {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil {
			return nil, fmt.Errorf("returned invalid converted object at index %v: %w", i, err)
		}
		out[i] = u
	}
	return out, nil
}

// clientConfig is lib/kube/webhook's form of a CRD's client config.
func clientConfig(in *apiextensionsv1.WebhookClientConfig) webhook.ClientConfig {
	out := webhook.ClientConfig{CABundle: in.CABundle}
	if in.URL != nil {
		out.URL = *in.URL
	}
	if s := in.Service; s != nil {
		out.Service = &webhook.ServiceReference{Namespace: s.Namespace, Name: s.Name}
		if s.Path != nil {
			out.Service.Path = *s.Path
		}
		if s.Port != nil {
			out.Service.Port = *s.Port
		}
	}
	return out
}

// checkConverted checks out, the webhook's conversion of in to gv, and
// gives it in's metadata but for the converted labels and annotations.
func checkConverted(in, out *unstructured.Unstructured, gv schema.GroupVersion) error {
	if got := out.GroupVersionKind().GroupVersion(); got != gv {
		return fmt.Errorf("invalid groupVersion (expected %v, received %v)", gv, got)
	}
	if e, a := in.GetKind(), out.GetKind(); e != a {
		return fmt.Errorf("invalid kind (expected %v, received %v)", e, a)
	}
	if e, a := in.GetName(), out.GetName(); e != a {
		return fmt.Errorf("must have the same name: %v != %v", e, a)
	}
	if e, a := in.GetNamespace(), out.GetNamespace(); e != a {
		return fmt.Errorf("must have the same namespace: %v != %v", e, a)
	}
	if e, a := in.GetUID(), out.GetUID(); e != a {
		return fmt.Errorf("must have the same UID: %v != %v", e, a)
	}
	return restoreObjectMeta(in, out)
}

// restoreObjectMeta sets converted's metadata to a copy of original's,
// keeping the labels and annotations the webhook returned (validated
// when they changed), as upstream's restoreObjectMeta does.
func restoreObjectMeta(original, converted *unstructured.Unstructured) error {
	respMeta, ok := converted.Object["metadata"].(map[string]any)
	if !ok {
		if _, found := converted.Object["metadata"]; !found {
			return errors.New("missing metadata in converted object")
		}
		return fmt.Errorf("invalid metadata of type %T in converted object", converted.Object["metadata"])
	}
	meta, _ := runtime.DeepCopyJSONValue(original.Object["metadata"]).(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	for _, fld := range []string{"labels", "annotations"} {
		v, found := respMeta[fld]
		if !found || v == nil {
			delete(meta, fld)
			continue
		}
		resp, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("invalid metadata.%s of type %T in converted object", fld, v)
		}
		orig, _ := meta[fld].(map[string]any)
		changed := len(orig) != len(resp)
		strs := make(map[string]string, len(resp))
		for k, v := range resp {
			s, ok := v.(string)
			if !ok {
				return fmt.Errorf("metadata.%s[%s] must be a string, but is %T in converted object", fld, k, v)
			}
			if o, ok := orig[k].(string); !ok || o != s {
				changed = true
			}
			strs[k] = s
		}
		if changed {
			var errs field.ErrorList
			if fld == "labels" {
				errs = metav1validation.ValidateLabels(strs, field.NewPath("metadata", "labels"))
			} else {
				errs = apivalidation.ValidateAnnotations(strs, field.NewPath("metadata", "annotations"))
			}
			if len(errs) > 0 {
				return errs.ToAggregate()
			}
		}
		meta[fld] = resp
	}
	converted.Object["metadata"] = meta
	return nil
}
