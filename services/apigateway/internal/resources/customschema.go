package resources

import (
	"context"

	"github.com/meridian-cp/meridian/lib/kube/crdschema"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Custom resources are admitted against their CRD version's schema
// (package crdschema): unknown fields pruned (reported per the request's
// fieldValidation), defaults applied, then the OpenAPI schema and the
// x-kubernetes-validations rules checked, before the generic strategy's
// metadata validation. Objects read from the store get the schema's
// defaults too (decodeRead), so a default added to a CRD shows on objects
// written before it.

// fieldValidationKey carries a write's fieldValidation parameter to
// admitSchema.
type fieldValidationKey struct{}

// withFieldValidation returns ctx carrying a write's fieldValidation.
func withFieldValidation(ctx context.Context, fv string) context.Context {
	return context.WithValue(ctx, fieldValidationKey{}, fv)
}

// admitSchema prunes, defaults and validates obj, a custom resource of res
// being created (old nil) or updated (through subresource sub), against
// its schema; warnings go to the client. Built-in resources pass.
func (s *Server) admitSchema(ctx context.Context, res *registry.Resource, obj, old runtime.Object, sub string) error {
	if res.Custom == nil {
		return nil
	}
	sch, err := res.Custom.Schema()
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	u := obj.(*unstructured.Unstructured)
	fv, _ := ctx.Value(fieldValidationKey{}).(string)
	var o *unstructured.Unstructured
	if old != nil {
		o = old.(*unstructured.Unstructured)
	}
	var warnings []string
	var fieldErrs field.ErrorList
	if sub == "status" {
		warnings, fieldErrs = sch.AdmitStatus(ctx, u, o, fv)
	} else {
		warnings, fieldErrs = sch.Admit(ctx, u, o, fv)
	}
	if len(warnings) > 0 {
		warn(ctx, warnings...)
	}
	if len(fieldErrs) > 0 {
		return crdschema.StatusError(res.GVK().GroupKind(), u.GetName(), fieldErrs)
	}
	return nil
}

// decodeRead decodes a stored value of res read at modRevision, converted
// to res's version (conversion.go), with the schema's defaults applied to
// a custom resource.
func (s *Server) decodeRead(ctx context.Context, res *registry.Resource, value []byte, modRevision int64) (runtime.Object, error) {
	obj, err := s.decodeStored(ctx, res, value, modRevision)
	if err != nil {
		return nil, err
	}
	res.DefaultOnRead(obj)
	return obj, nil
}
