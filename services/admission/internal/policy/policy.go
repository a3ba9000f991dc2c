// Package policy is the admission pipeline: the policies that match a
// request are evaluated in order, the first denial wins, and warnings and
// audit annotations accumulate.
//
// Policy kinds plug in behind two small interfaces: a Set finds the
// policies matching a request and describes which requests it could match
// (its Scope), a Policy decides about one. Today the service wires the
// Empty set (no policy kinds are served yet; CEL ValidatingAdmissionPolicy
// comes with its own issue), which admits everything and whose scope is
// empty.
//
// # Scope and consistency
//
// Gateways follow the set's Scope (the WatchScope call) and call Admit only
// for requests inside it. A request outside the scope a gateway holds is
// admitted there, without a call. So a policy added to a set applies to a
// gateway's requests once the new scope has reached that gateway (one
// stream message after the set's change channel closes), not at the
// instant the set changes — the same trade-off as kube-apiserver, whose
// admission policies come from informers and take effect shortly after
// they are created. A gateway with no scope (its stream not yet
// established or broken, or this service older than WatchScope) calls
// Admit for every write, so the lag is bounded by one message on a live
// stream.
package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"gomodules.xyz/jsonpatch/v2"
	"google.golang.org/protobuf/proto"

	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/internal/admissionmetrics"
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

// Set finds the policies that apply to a request, in evaluation order, and
// describes which requests it could find any for. Both methods must be safe
// for concurrent use and cheap: Matching runs on every write that gateways
// send.
type Set interface {
	// Matching returns the policies that apply to req, in evaluation
	// order.
	Matching(req *admissionv1.AdmitRequest) []Policy
	// Scope returns which requests Matching could return policies for now
	// — a superset: for a request outside it, Matching must return none —
	// and a channel that is closed when the set changes, after which
	// Scope returns the new scope. A set that never changes returns a nil
	// channel. A set that grows must publish the wider scope (close the
	// channel) no later than Matching starts returning the new policies;
	// one that shrinks should stop matching before it narrows its scope.
	Scope() (Scope, <-chan struct{})
}

// Scope describes which requests a Set's policies could match, by
// operation, API group and resource: what a gateway can check without the
// object. A Set describes a superset of its policies' match constraints:
// a CEL policy's resourceRules become Rules (its versions dropped, since
// matchPolicy Equivalent also matches other versions of the resource, and
// its namespace and object selectors, excludeResourceRules and match
// conditions ignored, since they only narrow); a policy that cannot be
// described sets Everything. The zero Scope matches nothing.
type Scope struct {
	// Everything is true when any request may match.
	Everything bool
	// Rules: a request is in scope when any rule covers it.
	Rules []Rule
}

// Rule covers requests as a Kubernetes RuleWithOperations does, without
// versions. In every field an empty list or "*" covers anything.
type Rule struct {
	// Operations covered.
	Operations []admissionv1.Operation
	// APIGroups covered; "" is the core group.
	APIGroups []string
	// Resources covered, with Kubernetes' subresource syntax: "pods" (not
	// its subresources), "pods/status", "pods/*" (pods and every
	// subresource), "*/status", "*" (every resource, no subresource), "*/*"
	// (everything).
	Resources []string
}

// Decision is one policy's verdict.
type Decision struct {
	// Denial is nil when the policy admits the request.
	Denial *Denial
	// Warnings are returned to the client as Warning headers.
	Warnings []string
	// AuditAnnotations are added to the request's audit event.
	AuditAnnotations map[string]string
	// Object, when not nil, is the request's object as the policy mutated
	// it (JSON): the policies after it see it, and the Result's Patch
	// turns the request's object into the last one.
	Object []byte
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

// Scope is empty and never changes.
func (Empty) Scope() (Scope, <-chan struct{}) { return Scope{}, nil }

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
	// Patch is the RFC 6902 JSON patch from the request's object to the
	// object the mutating policies made; empty when none changed it.
	Patch []byte
}

// Evaluator runs the pipeline over a Set.
type Evaluator struct {
	Set Set
	// Metrics receives each request's admit and validate step durations
	// (apiserver_admission_step_admission_duration_seconds); nil: none.
	Metrics *admissionmetrics.Metrics
}

// Admit evaluates the policies matching req in order and stops at the
// first denial. A policy that mutates the object hands the mutated object
// to the policies after it; once the last mutating policy ran, if any
// changed the object, the mutating policies' reinvocation pass runs (see
// Reinvocable). Matching runs once, on the request's object,
// so object selectors see the object as the client sent it. It fails
// only when ctx is done.
func (e Evaluator) Admit(ctx context.Context, req *admissionv1.AdmitRequest) (res Result, err error) {
	res = Result{Allowed: true}
	if e.Set == nil {
		return res, nil
	}
	orig := req.GetObject()
	defer func() {
		if err == nil && res.Allowed && !bytes.Equal(req.GetObject(), orig) {
			p, err := jsonpatch.CreatePatch(orig, req.GetObject())
			if err == nil && len(p) > 0 {
				res.Patch, err = json.Marshal(p)
			}
			if err != nil {
				res = Result{Denial: &Denial{Code: http.StatusInternalServerError, Reason: "InternalError",
					Message: fmt.Sprintf("admission policy: computing the patch: %v", err)}}
			}
		}
	}()
	steps := steps{metrics: e.Metrics, op: req.GetOperation(), start: time.Now(), typ: admissionmetrics.TypeAdmit}
	defer func() { steps.end(err == nil && !res.Allowed) }()
	policies := e.Set.Matching(req)
	// mutated is set once a mutating policy changed the object: the
	// mutating policies then run their reinvocation pass, once
	// (reinvoked).
	mutated, reinvoked := false, false
	run := func(i int, reinvoke bool) (stop bool, err error) {
		p := policies[i]
		if err := ctx.Err(); err != nil {
			return true, err
		}
		d, err := evaluate(ctx, p, i, req, reinvoke)
		if err != nil {
			if ctx.Err() != nil {
				return true, ctx.Err()
			}
			if fp, ok := p.(FailurePolicy); ok && fp.IgnoreFailure() {
				return false, nil
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
			return true, nil
		}
		if d.Object != nil && !bytes.Equal(d.Object, req.GetObject()) {
			// The request is not modified: the policies after this one
			// get a copy carrying the mutated object.
			next := proto.Clone(req).(*admissionv1.AdmitRequest)
			next.Object = d.Object
			req = next
			mutated = true
		}
		return false, nil
	}
	for i, p := range policies {
		steps.next(p)
		if stop, err := run(i, false); stop || err != nil {
			return res, err
		}
		if !mutated || reinvoked || (i+1 < len(policies) && isMutating(policies[i+1])) {
			continue
		}
		// The last mutating policy ran and the object changed: the
		// reinvocation pass, once, before any validating policy.
		reinvoked = true
		for j := 0; j <= i; j++ {
			if _, ok := policies[j].(Reinvocable); !ok {
				continue
			}
			if stop, err := run(j, true); stop || err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

func isMutating(p Policy) bool {
	m, ok := p.(Mutator)
	return ok && m.Mutating()
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

// steps times a request's admit step (its mutating policies, which come
// first) and its validate step (the others) for the step metric.
type steps struct {
	metrics *admissionmetrics.Metrics
	op      admissionv1.Operation
	start   time.Time
	typ     string // the step running
	ran     bool   // a policy of typ ran
}

// next starts timing p, ending the admit step when p does not mutate.
func (s *steps) next(p Policy) {
	if s.metrics == nil {
		return
	}
	if m, ok := p.(Mutator); s.typ == admissionmetrics.TypeAdmit && !(ok && m.Mutating()) {
		s.end(false)
		s.typ, s.start = admissionmetrics.TypeValidate, time.Now()
	}
	s.ran = true
}

// end records the running step, if any policy ran in it.
func (s *steps) end(rejected bool) {
	if s.metrics == nil || !s.ran {
		return
	}
	s.metrics.ObserveStep(s.op, s.typ, rejected, time.Since(s.start))
	s.ran = false
}
