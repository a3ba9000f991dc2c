package resources

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The scale subresource of custom resources: an autoscaling/v1 Scale
// whose spec.replicas is the object's specReplicasPath, status.replicas
// its statusReplicasPath and status.selector its labelSelectorPath (as
// kube-apiserver's customresource scale storage). Reading it reads the
// object; writing it (update or patch, what kubectl scale sends) is an
// update of the object's replicas, which bumps its generation.

const scaleSubresource = "scale"

// scaleGVK is the kind of the scale subresource's bodies.
var scaleGVK = autoscalingv1.SchemeGroupVersion.WithKind("Scale")

// isScale reports whether ref names the scale subresource of a custom
// resource that serves it.
func isScale(res *registry.Resource, ref *apiv1.ResourceRef) bool {
	return ref.GetSubresource() == scaleSubresource && res.Custom != nil && res.Custom.Scale != nil
}

// mainRef is ref without its subresource.
func mainRef(ref *apiv1.ResourceRef) *apiv1.ResourceRef {
	return &apiv1.ResourceRef{Group: ref.GetGroup(), Version: ref.GetVersion(), Resource: ref.GetResource(), Namespace: ref.GetNamespace(), Name: ref.GetName()}
}

// fieldPath splits a scale path (".spec.replicas") into its fields.
func fieldPath(p string) []string { return strings.Split(strings.TrimPrefix(p, "."), ".") }

// scaleOf returns the Scale of obj, a custom resource of res.
func scaleOf(res *registry.Resource, obj runtime.Object) (*autoscalingv1.Scale, error) {
	u := obj.(*unstructured.Unstructured)
	paths := res.Custom.Scale
	sc := &autoscalingv1.Scale{}
	sc.APIVersion, sc.Kind = scaleGVK.GroupVersion().String(), scaleGVK.Kind
	sc.Name, sc.Namespace, sc.UID = u.GetName(), u.GetNamespace(), u.GetUID()
	sc.ResourceVersion, sc.CreationTimestamp = u.GetResourceVersion(), u.GetCreationTimestamp()
	if v, ok, err := unstructured.NestedFieldNoCopy(u.Object, fieldPath(paths.SpecReplicasPath)...); err == nil && ok {
		n, ok := asInt32(v)
		if !ok {
			return nil, apierrors.NewInternalError(fmt.Errorf("%s is not an integer: %v", paths.SpecReplicasPath, v))
		}
		sc.Spec.Replicas = n
	}
	if v, ok, err := unstructured.NestedFieldNoCopy(u.Object, fieldPath(paths.StatusReplicasPath)...); err == nil && ok {
		sc.Status.Replicas, _ = asInt32(v)
	}
	if paths.LabelSelectorPath != nil {
		if v, ok, err := unstructured.NestedFieldNoCopy(u.Object, fieldPath(*paths.LabelSelectorPath)...); err == nil && ok {
			sc.Status.Selector, _ = v.(string)
		}
	}
	return sc, nil
}

func asInt32(v any) (int32, bool) {
	switch n := v.(type) {
	case int64:
		return int32(n), true
	case float64:
		return int32(n), n == float64(int32(n))
	case json.Number:
		i, err := n.Int64()
		return int32(i), err == nil
	}
	return 0, false
}

// getScale serves a get of the scale subresource.
func (s *Server) getScale(ctx context.Context, res *registry.Resource, ref *apiv1.ResourceRef, out output) (runtime.Object, error) {
	obj, _, _, err := s.readStored(ctx, res, ref.GetNamespace(), ref.GetName())
	if err != nil {
		return nil, err
	}
	return scaleOf(res, obj)
}

// writeScale updates the replicas of the object ref names to what
// newScale makes of its current Scale, and returns the Scale stored.
// precondition is the resourceVersion the client's Scale carries; the
// write is recorded in managedFields as fieldManager's through /scale.
func (s *Server) writeScale(ctx context.Context, res *registry.Resource, ref *apiv1.ResourceRef, precondition, fieldManager string, dryRun bool, newScale func(cur *autoscalingv1.Scale) (*autoscalingv1.Scale, error)) (runtime.Object, error) {
	obj, err := s.updateLoop(ctx, res, mainRef(ref), precondition, dryRun, func(old runtime.Object) (runtime.Object, error) {
		cur, err := scaleOf(res, old)
		if err != nil {
			return nil, err
		}
		sc, err := newScale(cur)
		if err != nil {
			return nil, err
		}
		if sc.Spec.Replicas < 0 {
			return nil, apierrors.NewInvalid(scaleGVK.GroupKind(), ref.GetName(), field.ErrorList{
				field.Invalid(field.NewPath("spec", "replicas"), sc.Spec.Replicas, "should be greater than or equal to 0")})
		}
		u := old.DeepCopyObject().(*unstructured.Unstructured)
		if err := unstructured.SetNestedField(u.Object, int64(sc.Spec.Replicas), fieldPath(res.Custom.Scale.SpecReplicasPath)...); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		u.SetResourceVersion("")
		return s.trackUpdate(ctx, res, ref, old, u, fieldManager), nil
	})
	if err != nil {
		return nil, err
	}
	return scaleOf(res, obj)
}

// updateScale serves an update (PUT) of the scale subresource.
func (s *Server) updateScale(ctx context.Context, res *registry.Resource, req *apiv1.UpdateRequest, dryRun bool) (runtime.Object, error) {
	body := req.GetBody()
	if body == nil || len(body.GetData()) == 0 {
		return nil, apierrors.NewBadRequest("the request body is empty")
	}
	sc := &autoscalingv1.Scale{}
	if err := s.cfg.Codec.Decode(body.GetData(), body.GetContentType(), scaleGVK, sc); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the object provided is unrecognized or malformed: %v", err))
	}
	if sc.Name != req.GetRef().GetName() {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", sc.Name, req.GetRef().GetName()))
	}
	if err := validateManager(req.GetFieldManager()); err != nil {
		return nil, err
	}
	return s.writeScale(ctx, res, req.GetRef(), sc.ResourceVersion, req.GetFieldManager(), dryRun, func(*autoscalingv1.Scale) (*autoscalingv1.Scale, error) { return sc, nil })
}

// patchScale serves a patch of the scale subresource: the patch applies
// to the Scale, as kubectl scale sends it.
func (s *Server) patchScale(ctx context.Context, res *registry.Resource, req *apiv1.PatchRequest, dryRun bool) (runtime.Object, error) {
	mediaType, data := req.GetBody().GetContentType(), req.GetBody().GetData()
	if err := validateManager(req.GetFieldManager()); err != nil {
		return nil, err
	}
	return s.writeScale(ctx, res, req.GetRef(), "", req.GetFieldManager(), dryRun, func(cur *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
		curJSON, err := json.Marshal(cur)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		var patched []byte
		switch mediaType {
		case negotiation.MergePatch:
			patched, err = jsonpatch.MergePatch(curJSON, data)
		case negotiation.StrategicMergePatch:
			patched, err = strategicpatch.StrategicMergePatch(curJSON, data, &autoscalingv1.Scale{})
		case negotiation.JSONPatch:
			var ops jsonpatch.Patch
			if ops, err = jsonpatch.DecodePatch(data); err == nil {
				patched, err = ops.Apply(curJSON)
			}
		default:
			return nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", schema.GroupResource{}, "", fmt.Sprintf("unsupported patch type %q", mediaType), 0, false)
		}
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the patch does not apply to the Scale: %v", err))
		}
		sc := &autoscalingv1.Scale{}
		if err := json.Unmarshal(patched, sc); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the patched Scale is invalid: %v", err))
		}
		return sc, nil
	})
}
