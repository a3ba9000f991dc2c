// Package policy is the admission pipeline: the policies that match a
// request are evaluated in order, the first denial wins, and warnings and
// audit annotations accumulate.
//
// Policy kinds plug in behind two small interfaces: a Set finds the
// policies matching a request, a Policy decides about one. Today the
// service wires the Empty set (no policy kinds are served yet; CEL
// ValidatingAdmissionPolicy comes with its own issue), which admits
// everything.
package policy

import (
	"context"
	"fmt"
	"net/http"

	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
)

// Policy decides about one request. Evaluate must be safe for concurrent
// use and must not modify req. An error means the policy could not decide
// (see FailurePolicy); it should name the policy.
type Policy interface {
	Evaluate(ctx context.Context, req *admissionv1.AdmitRequest) (Decision, error)
}

// FailurePolicy is an optional interface of a Policy. When IgnoreFailure
// reports true, an evaluation error is skipped (Kubernetes'
// failurePolicy: Ignore); otherwise it denies the request (failurePolicy:
// Fail, the default).
type FailurePolicy interface {
	IgnoreFailure() bool
}

// Set finds the policies that apply to a request, in evaluation order.
// Matching must be safe for concurrent use and cheap: it runs on every
// write.
type Set interface {
	Matching(req *admissionv1.AdmitRequest) []Policy
}

// Decision is one policy's verdict.
type Decision struct {
	// Denial is nil when the policy admits the request.
	Denial *Denial
	// Warnings are returned to the client as Warning headers.
	Warnings []string
	// AuditAnnotations are added to the request's audit event.
	AuditAnnotations map[string]string
}

// Denial is why a request was denied, as a Kubernetes Status.
type Denial struct {
	// Code is the HTTP status code; 0 means 403.
	Code int32
	// Reason is the Kubernetes StatusReason; empty means Forbidden (or
	// Invalid for code 422).
	Reason string
	// Message is shown to the client.
	Message string
}

// Empty is the Set without policies: it admits every request.
type Empty struct{}

// Matching returns no policies.
func (Empty) Matching(*admissionv1.AdmitRequest) []Policy { return nil }

var _ Set = Empty{}

// Result is the outcome of the whole pipeline for one request.
type Result struct {
	// Allowed is true when no policy denied the request.
	Allowed bool
	// Denial is the first denial; nil when allowed.
	Denial *Denial
	// Warnings of every policy evaluated, in order.
	Warnings []string
	// AuditAnnotations of every policy evaluated; on a key clash the first
	// policy's value is kept.
	AuditAnnotations map[string]string
}

// Evaluator runs the pipeline over a Set.
type Evaluator struct {
	Set Set
}

// Admit evaluates the policies matching req in order and stops at the
// first denial. It fails only when ctx is done.
func (e Evaluator) Admit(ctx context.Context, req *admissionv1.AdmitRequest) (Result, error) {
	res := Result{Allowed: true}
	if e.Set == nil {
		return res, nil
	}
	for _, p := range e.Set.Matching(req) {
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		d, err := p.Evaluate(ctx, req)
		if err != nil {
			if ctx.Err() != nil {
				return Result{}, ctx.Err()
			}
			if fp, ok := p.(FailurePolicy); ok && fp.IgnoreFailure() {
				continue
			}
			d = Decision{Denial: &Denial{
				Code:    http.StatusInternalServerError,
				Reason:  "InternalError",
				Message: fmt.Sprintf("admission policy failed: %v", err),
			}}
		}
		res.Warnings = append(res.Warnings, d.Warnings...)
		for k, v := range d.AuditAnnotations {
			if res.AuditAnnotations == nil {
				res.AuditAnnotations = map[string]string{}
			}
			if _, ok := res.AuditAnnotations[k]; !ok {
				res.AuditAnnotations[k] = v
			}
		}
		if d.Denial != nil {
			den := normalize(*d.Denial)
			res.Allowed, res.Denial = false, &den
			return res, nil
		}
	}
	return res, nil
}

// normalize fills a denial's defaults.
func normalize(d Denial) Denial {
	if d.Code == 0 {
		d.Code = http.StatusForbidden
	}
	if d.Reason == "" {
		switch d.Code {
		case http.StatusUnprocessableEntity:
			d.Reason = "Invalid"
		case http.StatusForbidden:
			d.Reason = "Forbidden"
		default:
			d.Reason = http.StatusText(int(d.Code))
		}
	}
	if d.Message == "" {
		d.Message = "denied by admission policy"
	}
	return d
}
