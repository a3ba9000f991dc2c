package resources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"github.com/meridian-cp/meridian/services/apigateway/internal/fieldmanager"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsyaml "sigs.k8s.io/yaml"
)

// # Server-side apply and managedFields
//
// Every create, update and patch records an Update entry in
// metadata.managedFields for its manager (the fieldManager parameter, or
// the first segment of the client's User-Agent), through the kind's
// managedfields.FieldManager (package fieldmanager). A PATCH with
// application/apply-patch+yaml is a server-side apply: the body, a partial
// object in YAML or JSON, is merged into the stored object (or into an
// empty one, creating it) by structured-merge-diff, which records an Apply
// entry, removes the fields the manager no longer applies and nobody else
// owns, and refuses, with a 409 naming the other manager per field, to
// change fields others own unless force is set. The merged object then
// takes the ordinary write path (server-owned metadata, strategy,
// validation, admission, a store compare-and-swap, retries).

// apply serves a PATCH with an apply body.
func (s *Server) apply(ctx context.Context, req *apiv1.PatchRequest, res *registry.Resource, dryRun bool) (runtime.Object, error) {
	ref := req.GetRef()
	kind, err := fieldmanager.ForKind(res, s.converter())
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	fv, err := parseFieldValidation(req.GetFieldValidation())
	if err != nil {
		return nil, err
	}
	patch, err := s.decodeApplied(ctx, req.GetBody().GetData(), fv)
	if err != nil {
		return nil, err
	}
	manager, force := req.GetFieldManager(), req.GetForce()
	// A resourceVersion in the applied configuration is a precondition,
	// as in any patch.
	precondition := patch.GetResourceVersion()
	for attempt := 0; attempt < maxConflictRetries; attempt++ {
		existed := false
		obj, err := s.updateLoop(ctx, res, ref, precondition, dryRun, func(old runtime.Object) (runtime.Object, error) {
			existed = true
			return s.applyConfig(ctx, kind, ref.GetSubresource(), old, patch, manager, force)
		})
		if existed || !apierrors.IsNotFound(err) || ref.GetSubresource() != "" || precondition != "" {
			return obj, err
		}
		// Nothing stored under the name: the apply creates the object.
		obj, err = s.applyCreate(ctx, kind, res, ref, patch, manager, force, dryRun)
		if apierrors.IsAlreadyExists(err) {
			continue // created meanwhile: merge into it
		}
		if err != nil {
			return nil, err
		}
		setHTTPCode(ctx, http.StatusCreated)
		return obj, nil
	}
	return nil, apierrors.NewConflict(res.GVR.GroupResource(), ref.GetName(), errors.New("too many concurrent writers; try again"))
}

// applyCreate merges an applied configuration into an empty object and
// creates it.
func (s *Server) applyCreate(ctx context.Context, kind *fieldmanager.Kind, res *registry.Resource, ref *apiv1.ResourceRef, patch *unstructured.Unstructured, manager string, force, dryRun bool) (runtime.Object, error) {
	obj, err := s.applyConfig(ctx, kind, "", res.New(), patch, manager, force)
	if err != nil {
		return nil, err
	}
	acc, err := meta.Accessor(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if err := checkNamespace(res, acc, ref.GetNamespace()); err != nil {
		return nil, err
	}
	if acc.GetName() != ref.GetName() {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", acc.GetName(), ref.GetName()))
	}
	return s.insert(ctx, res, ref, obj, acc, dryRun)
}

// applyConfig merges the applied configuration patch (which it does not
// change) into live through subresource sub as manager; see
// fieldmanager.Kind.Apply. A panic in the merge is a 400 (recoverPatch).
func (s *Server) applyConfig(ctx context.Context, kind *fieldmanager.Kind, sub string, live runtime.Object, patch *unstructured.Unstructured, manager string, force bool) (_ runtime.Object, err error) {
	defer s.recoverPatch(ctx, negotiation.ApplyPatchYAML, &err)
	return kind.Apply(sub, live, patch.DeepCopy(), manager, force)
}

// decodeApplied is decodeApply with a panic of the YAML reader turned into
// a 400 (recoverPatch).
func (s *Server) decodeApplied(ctx context.Context, data []byte, fv fieldValidation) (_ *unstructured.Unstructured, err error) {
	defer s.recoverPatch(ctx, negotiation.ApplyPatchYAML, &err)
	return decodeApply(ctx, data, fv)
}

// decodeApply decodes an applied configuration (YAML, or JSON, which is
// YAML) as kube-apiserver does: into an unstructured object, with duplicate
// fields reported as fieldValidation says. Unknown fields are always an
// error, found later against the kind's schema. Integers are int64, as in
// every other unstructured object here (util/json's number rules): the
// merged object keeps the applied values as they are, and a custom
// resource's checks (NestedInt64 of a scale subresource's replicas, CEL's
// int) refuse a float64 2.
//
// Unless duplicates are ignored the strict reader goes first: when it
// succeeds its object is the one the lenient reader would return (strict
// only adds errors), so a well-formed configuration is read once, not
// twice.
func decodeApply(ctx context.Context, data []byte, fv fieldValidation) (*unstructured.Unstructured, error) {
	obj := map[string]any{}
	var strictErr error
	if fv != validationIgnore {
		if strictErr = sigsyaml.UnmarshalStrict(data, &obj, useNumber); strictErr != nil {
			obj = map[string]any{}
		}
	}
	if fv == validationIgnore || strictErr != nil {
		if err := sigsyaml.Unmarshal(data, &obj, useNumber); err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding YAML: %v", err))
		}
	}
	if obj == nil {
		return nil, apierrors.NewBadRequest("error decoding YAML: the applied configuration must be an object")
	}
	if err := utiljson.ConvertMapNumbers(obj, 0); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding YAML: %v", err))
	}
	if strictErr != nil {
		if fv == validationStrict {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("error strict decoding YAML: %v", strictErr))
		}
		warn(ctx, strictErr.Error())
	}
	return &unstructured.Unstructured{Object: obj}, nil
}

// useNumber makes the YAML reader keep numbers as json.Number, for
// ConvertMapNumbers to make int64 or float64 of.
func useNumber(d *json.Decoder) *json.Decoder {
	d.UseNumber()
	return d
}

// validatePatchOptions checks what kube-apiserver's ValidatePatchOptions
// checks of fieldManager and force (422, as there): apply needs a
// fieldManager, other patches may not set force.
func validatePatchOptions(req *apiv1.PatchRequest) error {
	var errs field.ErrorList
	if req.GetBody().GetContentType() == negotiation.ApplyPatchYAML {
		if req.GetFieldManager() == "" {
			errs = append(errs, field.Required(field.NewPath("fieldManager"), "is required for apply patch"))
		}
	} else if req.Force != nil {
		errs = append(errs, field.Forbidden(field.NewPath("force"), "may not be specified for non-apply patch"))
	}
	errs = append(errs, metav1validation.ValidateFieldManager(req.GetFieldManager(), field.NewPath("fieldManager"))...)
	return optionsError("PatchOptions", errs)
}

// validateManager checks the fieldManager of a create or update.
func validateManager(fieldManager string) error {
	return optionsError("UpdateOptions", metav1validation.ValidateFieldManager(fieldManager, field.NewPath("fieldManager")))
}

func optionsError(kind string, errs field.ErrorList) error {
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: kind}, "", errs)
}

// trackCreate records the Update entry of a create; obj is the decoded
// body. It returns the object to store (managedFields set) and its
// accessor.
func (s *Server) trackCreate(ctx context.Context, res *registry.Resource, obj runtime.Object, fieldManager string) (runtime.Object, metav1.Object, error) {
	if errs := metav1validation.ValidateFieldManager(fieldManager, field.NewPath("fieldManager")); len(errs) > 0 {
		return nil, nil, optionsError("CreateOptions", errs)
	}
	if kind, err := fieldmanager.ForKind(res, s.converter()); err == nil {
		obj = kind.Update("", res.New(), obj, fieldmanager.Manager(ctx, fieldManager))
	} else {
		s.cfg.Logger.Error("managedFields not tracked", "resource", res.GVR.String(), "error", err)
	}
	acc, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil, apierrors.NewInternalError(err)
	}
	return obj, acc, nil
}

// trackUpdate records the Update entry of an update or non-apply patch of
// old into obj (through ref's subresource), and returns obj with its
// managedFields. It never fails the write.
func (s *Server) trackUpdate(ctx context.Context, res *registry.Resource, ref *apiv1.ResourceRef, old, obj runtime.Object, fieldManager string) runtime.Object {
	kind, err := fieldmanager.ForKind(res, s.converter())
	if err != nil {
		s.cfg.Logger.Error("managedFields not tracked", "resource", res.GVR.String(), "error", err)
		return obj
	}
	return kind.Update(ref.GetSubresource(), old, obj, fieldmanager.Manager(ctx, fieldManager))
}
