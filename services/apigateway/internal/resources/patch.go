package resources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"unicode/utf8"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"google.golang.org/genproto/googleapis/api/httpbody"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	sigsyaml "sigs.k8s.io/yaml"
)

// maxJSONPatchOperations bounds a JSON patch, as kube-apiserver does, so a
// small body cannot ask for unbounded work.
const maxJSONPatchOperations = 10000

// Patch changes an object with a JSON patch (RFC 6902), a JSON merge patch
// (RFC 7386) or a strategic merge patch (merge keys and strategies from the
// k8s.io/api types), chosen by the body's media type. A resourceVersion the
// patch sets is a precondition; otherwise the patch is re-applied over
// concurrent writes.
func (s *Server) Patch(ctx context.Context, req *apiv1.PatchRequest) (*httpbody.HttpBody, error) {
	return s.write(ctx, req.GetAccept(), 0, func() (runtime.Object, error) { return s.patch(ctx, req) })
}

func (s *Server) patch(ctx context.Context, req *apiv1.PatchRequest) (runtime.Object, error) {
	ref := req.GetRef()
	res, err := s.resolve(ref, true)
	if err != nil {
		return nil, err
	}
	dryRun, err := isDryRun(req.GetDryRun())
	if err != nil {
		return nil, err
	}
	body := req.GetBody()
	if body == nil || len(body.GetData()) == 0 {
		return nil, apierrors.NewBadRequest("the patch is empty")
	}
	patch := body.GetData()
	kind := body.GetContentType()
	if err := validatePatchOptions(req); err != nil {
		return nil, err
	}
	// ops is the decoded JSON patch, applied by every attempt: Apply reads
	// it and does not change it.
	var ops jsonpatch.Patch
	switch kind {
	case negotiation.ApplyPatchYAML:
		return s.apply(ctx, req, res, dryRun)
	case negotiation.JSONPatch:
		ops, err = jsonpatch.DecodePatch(patch)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid JSON patch: %v", err))
		}
		if len(ops) > maxJSONPatchOperations {
			return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the JSON patch has %d operations, more than %d", len(ops), maxJSONPatchOperations))
		}
	case negotiation.MergePatch, negotiation.StrategicMergePatch:
		if !jsonObject(patch) {
			return nil, apierrors.NewBadRequest("a merge patch must be a JSON object")
		}
	default:
		return nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", res.GVR.GroupResource(), ref.GetName(),
			fmt.Sprintf("unsupported patch type %q: use %s, %s, %s or %s", kind, negotiation.JSONPatch, negotiation.MergePatch, negotiation.StrategicMergePatch, negotiation.ApplyPatchYAML), 0, false)
	}
	precondition, err := patchPrecondition(kind, patch)
	if err != nil {
		return nil, err
	}
	fv, err := parseFieldValidation(req.GetFieldValidation())
	if err != nil {
		return nil, err
	}
	return s.updateLoop(ctx, res, ref, precondition, dryRun, func(old runtime.Object) (runtime.Object, error) {
		cur, err := s.cfg.Codec.EncodeToBytes(old.DeepCopyObject(), negotiation.JSON)
		if err != nil {
			return nil, apierrors.NewInternalError(err)
		}
		var patched []byte
		switch kind {
		case negotiation.JSONPatch:
			patched, err = ops.Apply(cur)
		case negotiation.MergePatch:
			patched, err = jsonpatch.MergePatch(cur, patch)
		case negotiation.StrategicMergePatch:
			patched, err = strategicpatch.StrategicMergePatch(cur, patch, res.New())
		}
		if err != nil {
			return nil, patchError(res.GVR.GroupResource(), ref.GetName(), err)
		}
		obj := res.New()
		problems, err := s.cfg.Codec.DecodeStrict(patched, negotiation.JSON, res.GVK(), obj)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("the patched object is invalid: %v", err))
		}
		if err := fv.apply(ctx, problems); err != nil {
			return nil, err
		}
		// The patched resourceVersion was checked as a precondition; the
		// stored one is authoritative.
		if acc, err := meta.Accessor(obj); err == nil {
			acc.SetResourceVersion("")
		}
		return s.trackUpdate(ctx, res, ref, old, obj, req.GetFieldManager()), nil
	})
}

// patchPrecondition returns the resourceVersion a merge patch sets (a
// precondition, as in kube-apiserver). JSON patches express preconditions
// with "test" operations instead.
//
// The patch is read as YAML (a superset of JSON, which also takes a number
// for a string). Merge patches are JSON, which encoding/json reads six
// times faster than the YAML reader, with the same result whenever it
// succeeds on valid UTF-8; it is tried first, and the YAML reader decides
// everything else, errors included.
func patchPrecondition(kind string, patch []byte) (string, error) {
	if kind == negotiation.JSONPatch {
		return "", nil
	}
	var p struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if utf8.Valid(patch) && json.Unmarshal(patch, &p) == nil {
		return p.Metadata.ResourceVersion, nil
	}
	p.Metadata.ResourceVersion = ""
	if err := sigsyaml.Unmarshal(patch, &p); err != nil {
		return "", apierrors.NewBadRequest(fmt.Sprintf("invalid patch: %v", err))
	}
	return p.Metadata.ResourceVersion, nil
}

func jsonObject(b []byte) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '{':
			return true
		default:
			return false
		}
	}
	return false
}

// patchError maps a failure to apply a patch: a failed "test" operation is a
// 409 Conflict (the object is not what the client expected); anything else
// a 422.
func patchError(gr schema.GroupResource, name string, err error) error {
	if _, ok := err.(*jsonpatch.AccumulatedCopySizeError); ok {
		return apierrors.NewRequestEntityTooLargeError(err.Error())
	}
	if errors.Is(err, jsonpatch.ErrTestFailed) {
		return apierrors.NewConflict(gr, name, err)
	}
	return apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "patch", gr, name, err.Error(), 0, false)
}
