package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/admission"

	admitv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/internal/admissionmetrics"
	"github.com/meridian-cp/meridian/services/admission/internal/policy"
)

// matching returns the hooks whose rules and selectors match a; match
// conditions are evaluated at the call, on the object it sees.
func (s *Set) matching(hooks []*hook, a admission.Attributes, ns *corev1.Namespace) []*hook {
	var out []*hook
	for _, h := range hooks {
		if !h.matchesRules(a) {
			continue
		}
		if !h.objSel.Empty() {
			nl, ol := objectLabels(a)
			if !h.objSel.Matches(labels.Set(nl)) && !h.objSel.Matches(labels.Set(ol)) {
				continue
			}
		}
		if !h.nsSel.Empty() {
			switch {
			case a.GetResource().Group == "" && a.GetResource().Resource == "namespaces" && a.GetSubresource() == "":
				nl, ol := objectLabels(a)
				if !h.nsSel.Matches(labels.Set(nl)) && !h.nsSel.Matches(labels.Set(ol)) {
					continue
				}
			case a.GetNamespace() == "":
				// Cluster-scoped: namespace selectors do not apply.
			case ns == nil:
				if !h.nsSel.Matches(labels.Set(nil)) {
					continue
				}
			default:
				if !h.nsSel.Matches(labels.Set(ns.Labels)) {
					continue
				}
			}
		}
		out = append(out, h)
	}
	return out
}

// failing is the Policy of a request whose objects do not decode.
type failing struct{ err error }

func (f failing) Evaluate(context.Context, *admitv1.AdmitRequest) (policy.Decision, error) {
	return policy.Decision{}, fmt.Errorf("admission webhooks: %w", f.err)
}

// outcome is one call's result: a denial, or a (possibly patched)
// object, warnings and annotations; skipped when the webhook was not
// called (its match conditions did not hold) or failed open.
type outcome struct {
	denial      *policy.Denial
	object      []byte
	warnings    []string
	annotations map[string]string
	// failedOpen is set when the call failed under failurePolicy Ignore.
	failedOpen bool
	// errorType is why denial is set, as the rejection metric says it
	// (admissionmetrics.Webhook*).
	errorType string
}

// call calls h about req with object as the request's object, and
// records the call in the webhook metrics.
func (s *Set) call(ctx context.Context, h *hook, req *admitv1.AdmitRequest, object []byte) outcome {
	start := time.Now()
	o := s.callHook(ctx, h, req, object)
	typ := admissionmetrics.TypeValidate
	if h.mutating {
		typ = admissionmetrics.TypeAdmit
	}
	var code int32
	if o.denial != nil {
		code = o.denial.Code
	}
	s.cfg.Metrics.ObserveWebhook(h.name, req.GetOperation(), typ, o.denial != nil, o.errorType, code, time.Since(start))
	return o
}

// callHook calls h about req with object as the request's object.
func (s *Set) callHook(ctx context.Context, h *hook, req *admitv1.AdmitRequest, object []byte) outcome {
	fail := func(err error) outcome {
		if h.ignore {
			s.cfg.Logger.Warn("admission webhook failed; failing open", "webhook", h.name, "configuration", h.config, "error", err)
			return outcome{object: object, failedOpen: true}
		}
		return outcome{errorType: admissionmetrics.WebhookCallingError, denial: &policy.Denial{Code: http.StatusInternalServerError, Reason: string(metav1.StatusReasonInternalError),
			Message: fmt.Sprintf("Internal error occurred: failed calling webhook %q: %v", h.name, err)}}
	}
	if h.err != nil {
		return fail(h.err)
	}
	if h.cond != nil {
		a, err := attributes(req, object)
		if err != nil {
			return fail(err)
		}
		m := h.cond.Match(ctx, a, nil, s.cfg.Authorizer)
		if m.Error != nil {
			return fail(m.Error)
		}
		if !m.Matches {
			return outcome{object: object}
		}
	}
	if req.GetDryRun() && !h.dryRunSafe {
		return outcome{errorType: admissionmetrics.WebhookInternalError, denial: &policy.Denial{Code: http.StatusBadRequest, Reason: string(metav1.StatusReasonBadRequest),
			Message: fmt.Sprintf("admission webhook %q does not support dry run", h.name)}}
	}
	if h.version == "" {
		return fail(errors.New("webhook does not accept admission.k8s.io/v1 or v1beta1 AdmissionReviews"))
	}
	body, err := encodeReview(h.version, reviewRequest(req, object))
	if err != nil {
		return fail(err)
	}
	data, err := s.cfg.Client.Post(ctx, h.client, h.timeout, body)
	if err != nil {
		return fail(err)
	}
	v, err := DecodeReview(data, h.version, req.GetUid(), h.mutating)
	if err != nil {
		return fail(fmt.Errorf("received invalid webhook response: %w", err))
	}
	out := outcome{object: object, warnings: v.warnings}
	for k, val := range v.auditAnnotations {
		if out.annotations == nil {
			out.annotations = map[string]string{}
		}
		out.annotations[h.name+"/"+k] = val
	}
	if !v.allowed {
		out.denial, out.errorType = denial(h.name, v.result), admissionmetrics.WebhookNoError
		return out
	}
	if len(v.patch) > 0 {
		p, err := jsonpatch.DecodePatch(v.patch)
		if err != nil {
			return outcome{errorType: admissionmetrics.WebhookInternalError, denial: internal(fmt.Errorf("admission webhook %q returned an invalid patch: %w", h.name, err))}
		}
		patched, err := p.Apply(object)
		if err != nil {
			return outcome{errorType: admissionmetrics.WebhookInternalError, denial: internal(fmt.Errorf("admission webhook %q returned a patch that does not apply: %w", h.name, err))}
		}
		if _, err := decodeObject(patched); err != nil {
			return outcome{errorType: admissionmetrics.WebhookInternalError, denial: internal(fmt.Errorf("admission webhook %q made the object invalid: %w", h.name, err))}
		}
		out.object = patched
	}
	return out
}

func internal(err error) *policy.Denial {
	return &policy.Denial{Code: http.StatusInternalServerError, Reason: string(metav1.StatusReasonInternalError),
		Message: "Internal error occurred: " + err.Error()}
}

// denial is a webhook's refusal as kube-apiserver reports it: its code
// (at least 400; 400 when it gave none), its reason, and its message
// behind `admission webhook "<name>" denied the request`.
func denial(name string, st *metav1.Status) *policy.Denial {
	if st == nil {
		st = &metav1.Status{}
	}
	deniedBy := fmt.Sprintf("admission webhook %q denied the request", name)
	d := &policy.Denial{Code: st.Code, Reason: string(st.Reason)}
	if d.Code < http.StatusBadRequest {
		d.Code = http.StatusBadRequest
	}
	switch {
	case st.Message != "":
		d.Message = deniedBy + ": " + st.Message
	case st.Reason != "":
		d.Message = deniedBy + ": " + string(st.Reason)
	default:
		d.Message = deniedBy + " without explanation"
	}
	if d.Reason == "" && d.Code == http.StatusBadRequest {
		d.Reason = string(metav1.StatusReasonBadRequest)
	}
	return d
}

// mutatingPolicy runs the matching mutating webhooks of one request.
// It is a policy.Reinvocable: Evaluate records which IfNeeded webhooks a
// later one changed the object after, and Reinvoke calls them again.
type mutatingPolicy struct {
	set   *Set
	hooks []*hook
	// invoked are the IfNeeded webhooks called since the object last
	// changed; reinvoke those to call again in the reinvocation pass.
	invoked, reinvoke []bool
	// output is the object as this policy last returned it.
	output []byte
}

var _ policy.Reinvocable = (*mutatingPolicy)(nil)

// Mutating reports true: the union runs it with the other mutating
// policies, before validation.
func (p *mutatingPolicy) Mutating() bool { return true }

// Evaluate calls each webhook in order on the object the ones before it
// made.
func (p *mutatingPolicy) Evaluate(ctx context.Context, req *admitv1.AdmitRequest) (policy.Decision, error) {
	p.invoked, p.reinvoke = make([]bool, len(p.hooks)), make([]bool, len(p.hooks))
	return p.run(ctx, req, 0), nil
}

// Reinvoke calls again the IfNeeded webhooks whose output was changed
// after they ran: by a later webhook, or by any other mutating policy
// (the object is not the one Evaluate returned).
func (p *mutatingPolicy) Reinvoke(ctx context.Context, req *admitv1.AdmitRequest) (policy.Decision, error) {
	if string(req.GetObject()) != string(p.output) {
		p.changed()
	}
	return p.run(ctx, req, 1), nil
}

// changed marks the webhooks called since the last change for
// reinvocation.
func (p *mutatingPolicy) changed() {
	for i, called := range p.invoked {
		if called {
			p.reinvoke[i], p.invoked[i] = true, false
		}
	}
}

// run calls the webhooks of round r (0: every one; 1: those marked for
// reinvocation) in order, each on the object the ones before it made.
func (p *mutatingPolicy) run(ctx context.Context, req *admitv1.AdmitRequest, round int) policy.Decision {
	var d policy.Decision
	object := req.GetObject()
	for i, h := range p.hooks {
		if round == 1 && !p.reinvoke[i] {
			continue
		}
		p.reinvoke[i] = false
		o := p.set.call(ctx, h, req, object)
		d.Warnings = append(d.Warnings, o.warnings...)
		addAnnotations(&d, o.annotations)
		if o.failedOpen {
			addAnnotations(&d, map[string]string{
				"failed-open.mutating.webhook.admission.k8s.io/round_" + strconv.Itoa(round) + "_index_" + strconv.Itoa(i): h.name,
			})
		}
		if o.denial != nil {
			d.Denial = o.denial
			return d
		}
		if string(o.object) != string(object) {
			object = o.object
			p.changed()
		}
		if h.reinvoke {
			p.invoked[i] = true
		}
	}
	p.output = object
	if string(object) != string(req.GetObject()) {
		d.Object = object
	}
	return d
}

// validatingPolicy calls the matching validating webhooks of one
// request in parallel.
type validatingPolicy struct {
	set   *Set
	hooks []*hook
}

// Evaluate calls every webhook at once; the first denial in webhook
// order wins, and every webhook's warnings and annotations are kept.
func (p *validatingPolicy) Evaluate(ctx context.Context, req *admitv1.AdmitRequest) (policy.Decision, error) {
	outs := make([]outcome, len(p.hooks))
	var wg sync.WaitGroup
	for i, h := range p.hooks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i] = p.set.call(ctx, h, req, req.GetObject())
		}()
	}
	wg.Wait()
	var d policy.Decision
	for i, o := range outs {
		d.Warnings = append(d.Warnings, o.warnings...)
		addAnnotations(&d, o.annotations)
		if o.failedOpen {
			addAnnotations(&d, map[string]string{"failed-open.validating.webhook.admission.k8s.io/round_0_index_" + strconv.Itoa(i): p.hooks[i].name})
		}
		if o.denial != nil && d.Denial == nil {
			d.Denial = o.denial
		}
	}
	return d, nil
}

func addAnnotations(d *policy.Decision, a map[string]string) {
	for k, v := range a {
		if d.AuditAnnotations == nil {
			d.AuditAnnotations = map[string]string{}
		}
		if _, ok := d.AuditAnnotations[k]; !ok {
			d.AuditAnnotations[k] = v
		}
	}
}
