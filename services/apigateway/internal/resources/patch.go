package resources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"unicode/utf8"

	"github.com/meridian-cp/meridian/lib/kube/negotiation"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	apiv1 "github.com/meridian-cp/meridian/proto/gen/meridian/api/v1"
	"google.golang.org/genproto/googleapis/api/httpbody"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/mergepatch"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	sigsyaml "sigs.k8s.io/yaml"
)

// maxJSONPatchOperations bounds a JSON patch, as kube-apiserver does, so a
// small body cannot ask for unbounded work.
const maxJSONPatchOperations = 10000

// maxJSONPatchCopyBytes bounds the bytes the "copy" operations of one JSON
// patch may add to the document (kube-apiserver's JSONPatchMaxCopyBytes,
// 3 MiB). Each copy can double the document, so without it a patch of a
// few kilobytes asks for gigabytes.
const maxJSONPatchCopyBytes = 3 << 20

// maxPatchedObjectBytes bounds the JSON of a patched object: what a PUT
// body may hold (kube-apiserver's MaxRequestBodyBytes, 3 MiB, the REST
// front end's request limit), so a patch cannot build an object no client
// could have sent.
const maxPatchedObjectBytes = 3 << 20

func init() {
	// json-patch v4 reads its copy limit from this package variable only;
	// kube-apiserver sets it the same way, once for the process. Its
	// default, 0, is no limit.
	jsonpatch.AccumulatedCopySizeLimit = maxJSONPatchCopyBytes
}

// Patch changes an object with a JSON patch (RFC 6902), a JSON merge patch
// (RFC 7386) or a strategic merge patch (merge keys and strategies from the
// k8s.io/api types), chosen by the body's media type. A resourceVersion the
// patch sets is a precondition; otherwise the patch is re-applied over
// concurrent writes.
func (s *Server) Patch(ctx context.Context, req *apiv1.PatchRequest) (*httpbody.HttpBody, error) {
	ctx = withFieldValidation(ctx, req.GetFieldValidation())
	return s.write(ctx, req.GetRef(), req.GetAccept(), 0, func() (runtime.Object, error) { return s.patch(ctx, req) })
}

func (s *Server) patch(ctx context.Context, req *apiv1.PatchRequest) (runtime.Object, error) {
	ref := req.GetRef()
	res, dryRun, err := s.resolveWrite(ctx, ref, req.GetDryRun())
	if err != nil {
		return nil, err
	}
	body := req.GetBody()
	if body == nil || len(body.GetData()) == 0 {
		return nil, apierrors.NewBadRequest("the patch is empty")
	}
	if err := validatePatchOptions(req); err != nil {
		return nil, err
	}
	if isScale(res, ref) {
		return s.patchScale(ctx, res, req, dryRun)
	}
	if res.Custom != nil && body.GetContentType() == negotiation.StrategicMergePatch {
		// Strategic merge needs Go struct tags: custom resources have
		// none (kube-apiserver answers the same).
		return nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", schema.GroupResource{}, "",
			fmt.Sprintf("the body of the request was in an unknown format - accepted media types include: %s, %s, %s", negotiation.JSONPatch, negotiation.MergePatch, negotiation.ApplyPatchYAML), 0, false)
	}
	if body.GetContentType() == negotiation.ApplyPatchYAML {
		return s.apply(ctx, req, res, dryRun)
	}
	fv, err := parseFieldValidation(req.GetFieldValidation())
	if err != nil {
		return nil, err
	}
	p, err := s.decodePatch(ctx, res, ref.GetName(), body.GetContentType(), body.GetData(), fv)
	if err != nil {
		return nil, err
	}
	return s.updateLoop(ctx, res, ref, p.precondition, dryRun, func(old runtime.Object) (runtime.Object, error) {
		return s.applyPatch(ctx, res, ref, p, old, req.GetFieldManager())
	})
}

// decodedPatch is a JSON, merge or strategic merge patch, checked and
// decoded once and applied to the object each attempt of the update reads.
type decodedPatch struct {
	// mediaType is the patch type.
	mediaType string
	// data is the body.
	data []byte
	// ops is the decoded JSON patch; Apply reads it and does not change
	// it.
	ops jsonpatch.Patch
	// precondition is the resourceVersion a merge patch sets, or "".
	precondition string
	fv           fieldValidation
}

// decodePatch checks and decodes the body of a non-apply patch. A body the
// patch libraries cannot read is a 400 (a panic in them included), too many
// JSON patch operations a 413, an unknown patch type a 415.
func (s *Server) decodePatch(ctx context.Context, res *registry.Resource, name, mediaType string, data []byte, fv fieldValidation) (_ *decodedPatch, err error) {
	defer s.recoverPatch(ctx, mediaType, &err)
	p := &decodedPatch{mediaType: mediaType, data: data, fv: fv}
	switch mediaType {
	case negotiation.JSONPatch:
		p.ops, err = jsonpatch.DecodePatch(data)
		if err != nil {
			return nil, apierrors.NewBadRequest(fmt.Sprintf("invalid JSON patch: %v", err))
		}
		if len(p.ops) > maxJSONPatchOperations {
			return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the JSON patch has %d operations, more than %d", len(p.ops), maxJSONPatchOperations))
		}
	case negotiation.MergePatch, negotiation.StrategicMergePatch:
		if !jsonObject(data) {
			return nil, apierrors.NewBadRequest("a merge patch must be a JSON object")
		}
	default:
		return nil, apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", res.GVR.GroupResource(), name,
			fmt.Sprintf("unsupported patch type %q: use %s, %s, %s or %s", mediaType, negotiation.JSONPatch, negotiation.MergePatch, negotiation.StrategicMergePatch, negotiation.ApplyPatchYAML), 0, false)
	}
	if p.precondition, err = patchPrecondition(mediaType, data); err != nil {
		return nil, err
	}
	return p, nil
}

// applyPatch applies p to old, the stored object (which it does not
// change), through its JSON form as kube-apiserver does, and returns the
// patched object with fieldManager's Update entry in its managedFields and
// no resourceVersion (the stored one is authoritative; the patched one was
// checked as a precondition). Every failure is a 4xx: a panic in the patch
// libraries a 400, a patched object over maxPatchedObjectBytes a 413.
func (s *Server) applyPatch(ctx context.Context, res *registry.Resource, ref *apiv1.ResourceRef, p *decodedPatch, old runtime.Object, fieldManager string) (_ runtime.Object, err error) {
	defer s.recoverPatch(ctx, p.mediaType, &err)
	cur, err := s.cfg.Codec.EncodeToBytes(old.DeepCopyObject(), negotiation.JSON)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	var patched []byte
	switch p.mediaType {
	case negotiation.JSONPatch:
		patched, err = p.ops.Apply(cur)
	case negotiation.MergePatch:
		patched, err = jsonpatch.MergePatch(cur, p.data)
	case negotiation.StrategicMergePatch:
		patched, err = strategicpatch.StrategicMergePatch(cur, p.data, res.New())
	default:
		return nil, apierrors.NewInternalError(fmt.Errorf("resources: unexpected patch type %q", p.mediaType))
	}
	if err != nil {
		return nil, patchError(res.GVR.GroupResource(), ref.GetName(), p.mediaType, err)
	}
	if len(patched) > maxPatchedObjectBytes {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("the patched object is %d bytes, more than the limit of %d", len(patched), maxPatchedObjectBytes))
	}
	obj := res.New()
	problems, err := s.cfg.Codec.DecodeStrict(patched, negotiation.JSON, res.GVK(), obj)
	if err != nil {
		return nil, patchedObjectError(res, patched, err)
	}
	if err := p.fv.apply(ctx, problems); err != nil {
		return nil, err
	}
	if acc, err := meta.Accessor(obj); err == nil {
		acc.SetResourceVersion("")
	}
	return s.trackUpdate(ctx, res, ref, old, obj, fieldManager), nil
}

// patchedObjectError is the 400 of a patched object that does not decode.
// One that names another apiVersion or kind says so: the decoder's own
// message for it names the source file of its scheme.
func patchedObjectError(res *registry.Resource, patched []byte, err error) error {
	var tm metav1.TypeMeta
	if json.Unmarshal(patched, &tm) == nil {
		gvk := res.GVK()
		if (tm.APIVersion != "" && tm.APIVersion != gvk.GroupVersion().String()) || (tm.Kind != "" && tm.Kind != gvk.Kind) {
			return apierrors.NewBadRequest(fmt.Sprintf("the patched object is a %q of apiVersion %q: a patch may not change the apiVersion %q or kind %q of the object", tm.Kind, tm.APIVersion, gvk.GroupVersion().String(), gvk.Kind))
		}
	}
	return apierrors.NewBadRequest(fmt.Sprintf("the patched object is invalid: %v", err))
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

// patchError maps a failure to apply a patch, as kube-apiserver does: a
// malformed strategic merge patch directive or a merge patch that is no
// JSON is a 400, anything else the patch cannot do to the object a 422
// Invalid, the accumulated copy limit included. A failed JSON patch "test"
// operation is a 409 Conflict (the object is not what the client
// expected). Errors the libraries did not classify, which kube-apiserver
// passes on as 500s, are 422s here: they come from the patch, not the
// server.
func patchError(gr schema.GroupResource, name, mediaType string, err error) error {
	var copyErr *jsonpatch.AccumulatedCopySizeError
	switch {
	case errors.As(err, &copyErr):
		return patchInvalid(gr, name, fmt.Sprintf("the JSON patch copies too much: %v", err))
	case errors.Is(err, jsonpatch.ErrTestFailed):
		return apierrors.NewConflict(gr, name, err)
	case errors.Is(err, jsonpatch.ErrBadJSONPatch),
		errors.Is(err, mergepatch.ErrBadJSONDoc),
		errors.Is(err, mergepatch.ErrBadPatchFormatForPrimitiveList),
		errors.Is(err, mergepatch.ErrBadPatchFormatForRetainKeys),
		errors.Is(err, mergepatch.ErrBadPatchFormatForSetElementOrderList),
		errors.Is(err, mergepatch.ErrUnsupportedStrategicMergePatchFormat):
		return apierrors.NewBadRequest(fmt.Sprintf("invalid %s: %v", patchName(mediaType), err))
	}
	return patchInvalid(gr, name, fmt.Sprintf("the %s cannot be applied: %v", patchName(mediaType), err))
}

// patchInvalid is the 422 Invalid of a patch that cannot be applied to the
// object, with message saying why.
func patchInvalid(gr schema.GroupResource, name, message string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusUnprocessableEntity,
		Reason:  metav1.StatusReasonInvalid,
		Message: message,
		Details: &metav1.StatusDetails{Group: gr.Group, Kind: gr.Resource, Name: name},
	}}
}

// patchName names a patch type in messages.
func patchName(mediaType string) string {
	switch mediaType {
	case negotiation.JSONPatch:
		return "JSON patch"
	case negotiation.MergePatch:
		return "merge patch"
	case negotiation.StrategicMergePatch:
		return "strategic merge patch"
	case negotiation.ApplyPatchYAML:
		return "applied configuration"
	}
	return "patch"
}

// recoverPatch, deferred by a function that decodes or applies a client's
// patch with err its named result, turns a panic in the patch libraries
// into a 400: their type switches assume well-formed directives, and a
// malformed one (a strategic merge patch's $retainKeys list holding an
// object) can panic deep inside them. The client learns that its patch is
// malformed, nothing about the panic; the log gets the panic and its
// stack.
func (s *Server) recoverPatch(ctx context.Context, mediaType string, err *error) {
	r := recover()
	if r == nil {
		return
	}
	s.cfg.Logger.WarnContext(ctx, "patch library panicked on a malformed patch", "type", mediaType, "panic", r, "stack", string(debug.Stack()))
	*err = apierrors.NewBadRequest(fmt.Sprintf("invalid %s: it is malformed and cannot be applied", patchName(mediaType)))
}
