package crdschema

import (
	"fmt"
	"strings"

	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// unknownFieldPrefix starts the message of every unknown-field error and
// warning, as upstream's strict decoder words it.
const unknownFieldPrefix = `unknown field "`

// Origins of the errors Admit reports that kube-apiserver reports while
// decoding a request, before validation, as 400 BadRequest.
const (
	originStrictDecoding = "strictDecoding"
	originDecoding       = "decoding"
)

// prunePaths prunes obj at the resource root and returns the paths of
// what it dropped when track is set.
func prunePaths(obj map[string]any, s *structuralschema.Structural, track bool) []string {
	return structuralpruning.PruneWithOptions(obj, s, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: track})
}

// unknownFieldMessage is upstream's text for one pruned field.
func unknownFieldMessage(path string) string {
	return fmt.Sprintf(`%s%s"`, unknownFieldPrefix, path)
}

// unknownFieldErrors turns pruned paths into the errors Admit returns
// under fieldValidation=Strict.
func unknownFieldErrors(paths []string) field.ErrorList {
	errs := make(field.ErrorList, 0, len(paths))
	for _, p := range paths {
		errs = append(errs, &field.Error{Type: field.ErrorTypeInvalid, Field: "", BadValue: p, Detail: unknownFieldMessage(p), Origin: originStrictDecoding})
	}
	return errs
}

// UnknownFieldErrors reports whether errs are the unknown-field errors
// Admit returns under fieldValidation=Strict (kube-apiserver answers those
// 400 BadRequest, not 422).
func UnknownFieldErrors(errs field.ErrorList) bool {
	if len(errs) == 0 {
		return false
	}
	for _, e := range errs {
		if e.Origin != originStrictDecoding {
			return false
		}
	}
	return true
}

// decodeError is the error for metadata that does not decode as
// metav1.ObjectMeta, worded as upstream's decoder: `Widget in version "v1"
// cannot be handled as a Widget: json: cannot unmarshal …`.
func (s *Schema) decodeError(err error) *field.Error {
	return &field.Error{
		Type: field.ErrorTypeInvalid, Field: "metadata", Origin: originDecoding,
		Detail: fmt.Sprintf("%s in version %q cannot be handled as a %s: %v", s.gvk.Kind, s.gvk.Version, s.gvk.Kind, err),
	}
}

// StatusError is the API error for errs returned by Admit or AdmitStatus
// about object name of kind gk, as kube-apiserver returns them: the
// strict-decoding unknown-field errors as 400 BadRequest
// `strict decoding error: unknown field "spec.foo", unknown field "spec.bar"`,
// metadata that does not decode as 400 BadRequest
// `Widget in version "v1" cannot be handled as a Widget: …`, everything
// else as 422 Invalid with one cause per error.
func StatusError(gk schema.GroupKind, name string, errs field.ErrorList) *apierrors.StatusError {
	if len(errs) == 1 && errs[0].Origin == originDecoding {
		return apierrors.NewBadRequest(errs[0].Detail)
	}
	if UnknownFieldErrors(errs) {
		msgs := make([]string, 0, len(errs))
		for _, e := range errs {
			msgs = append(msgs, e.Detail)
		}
		return apierrors.NewBadRequest("strict decoding error: " + strings.Join(msgs, ", "))
	}
	return apierrors.NewInvalid(gk, name, errs)
}
