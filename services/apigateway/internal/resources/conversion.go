package resources

import (
	"context"
	"fmt"

	"github.com/meridian-cp/meridian/lib/kube/crdconvert"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// Custom resources are stored at their CRD's storage version and served
// at the version a request names, as kube-apiserver does: every object
// read from the store is converted to the served version (decodeStored),
// every object written is converted to the storage version just before
// it is encoded (encodeStored). Everything in between — admission, the
// schema, the strategy, field managers, the response — sees the request's
// version. Conversion None only changes apiVersion; conversion Webhook
// calls the CRD's webhook (crdconvert), and a failed call is a 500 with
// the webhook's message, which ends the request (or the watch).
//
// Whatever serves stored bytes without decoding them here (a watch tier
// holding storage-version objects) must leave resources that need
// conversion (needsConversion) to this path, or convert on the way out.

// needsConversion reports whether objects of res are served at another
// version than the one they are stored at.
func needsConversion(res *registry.Resource) bool {
	return res.Custom != nil && res.Custom.Version != res.Custom.StorageVersion
}

// converter is the Server's converter: the configured one, or one that
// converts only strategy None.
func (s *Server) converter() *crdconvert.Converter {
	if s.cfg.Converter != nil {
		return s.cfg.Converter
	}
	return noWebhooks
}

// noWebhooks converts custom resources when no converter is configured:
// strategy None only.
var noWebhooks = crdconvert.New(nil, 0)

// decodeStored decodes a stored value of res read at modRevision,
// converted to res's version.
func (s *Server) decodeStored(ctx context.Context, res *registry.Resource, value []byte, modRevision int64) (runtime.Object, error) {
	if res.Custom == nil {
		obj := res.New()
		if err := s.cfg.Codec.DecodeStorage(value, modRevision, obj); err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		return obj, nil
	}
	u, err := s.decodeAsStored(res, value, modRevision)
	if err != nil {
		return nil, err
	}
	if err := s.convertObjects(ctx, res, []*unstructured.Unstructured{u}, res.Custom.Version); err != nil {
		return nil, err
	}
	return u, nil
}

// decodeAsStored decodes a stored custom resource of res at the version
// it is stored at: decoded into an object without apiVersion, the stored
// one is kept (the version to convert from).
func (s *Server) decodeAsStored(res *registry.Resource, value []byte, modRevision int64) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	if err := s.cfg.Codec.DecodeStorage(value, modRevision, u); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if u.GetAPIVersion() == "" {
		u.SetGroupVersionKind(res.GVK())
	}
	return u, nil
}

// asCustom is obj as a custom resource; nil for a built-in object.
func asCustom(obj runtime.Object) *unstructured.Unstructured {
	u, _ := obj.(*unstructured.Unstructured)
	return u
}

// convertObjects converts objs, custom resources of res, to version in
// place (all of them or, on error, none); a failure is a 500 carrying
// the converter's message. Built-in resources pass.
func (s *Server) convertObjects(ctx context.Context, res *registry.Resource, objs []*unstructured.Unstructured, version string) error {
	if res.Custom == nil {
		return nil
	}
	if err := s.converter().Convert(ctx, res.Custom.CRD, objs, version); err != nil {
		return apierrors.NewInternalError(err)
	}
	return nil
}

// encodeStored returns obj, an object of res, as the store holds it: a
// custom resource converted to its storage version (obj itself stays at
// the served version).
func (s *Server) encodeStored(ctx context.Context, res *registry.Resource, obj runtime.Object) ([]byte, error) {
	u := asCustom(obj)
	if u == nil || res.Custom == nil || !needsConversion(res) {
		return s.encode(obj)
	}
	if !crdconvert.NeedsWebhook(res.Custom.CRD) {
		// Conversion None: only apiVersion differs.
		served := u.GetAPIVersion()
		defer u.SetAPIVersion(served)
	} else {
		u = u.DeepCopy()
	}
	if err := s.convertObjects(ctx, res, []*unstructured.Unstructured{u}, res.Custom.StorageVersion); err != nil {
		return nil, err
	}
	return s.encode(u)
}

// encode is Codec.EncodeStorage with its error as a 500.
func (s *Server) encode(obj runtime.Object) ([]byte, error) {
	data, err := s.cfg.Codec.EncodeStorage(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("encode for storage: %w", err))
	}
	return data, nil
}
