package policy

import (
	"context"

	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
)

// Reinvocable is an optional interface of a mutating Policy: it takes
// part in kube-apiserver's reinvocation (reinvocationPolicy IfNeeded)
// across every mutating policy of a request — the CEL mutating policies
// and the mutating webhooks alike.
//
// The Evaluator runs the mutating policies once, in order (Evaluate).
// When any of them changed the object, it runs, once more and in order,
// the Reinvoke of each Reinvocable among them, on the object the mutating
// policies made, before any validating policy. Reinvoke re-runs those of
// the policy's members (bindings, webhooks) with reinvocationPolicy
// IfNeeded that ran in the first pass and whose output was changed after
// they ran: by a later member of the same policy, or by any other policy
// (the object differs from the one this policy last returned). Nothing
// runs a third time, as in kube-apiserver.
//
// A Reinvocable is made for one request: Evaluate records what Reinvoke
// needs, and the two are never called concurrently.
type Reinvocable interface {
	Policy
	Reinvoke(ctx context.Context, req *admissionv1.AdmitRequest) (Decision, error)
}
