package admissionmetrics

import (
	"errors"
	"testing"
)

// Mutation errors are classified as kube-apiserver's mutating policy
// plugin classifies them, by the CEL library's messages.
func TestMutationErrorType(t *testing.T) {
	for err, want := range map[error]string{
		nil: MutationNoError,
		errors.New("compilation failed: ERROR: <input>:1:1: undeclared reference"):                                 MutationCompileError,
		errors.New("validation failed due to running out of cost budget, no further validation rules will be run"): MutationOutOfBudget,
		errors.New("JSON Patch: remove operation does not apply: doc is missing path"):                             MutationInvalidError,
	} {
		if got := MutationErrorType(err); got != want {
			t.Errorf("MutationErrorType(%v) = %q, want %q", err, got, want)
		}
	}
}
