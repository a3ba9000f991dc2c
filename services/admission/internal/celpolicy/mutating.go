package celpolicy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/policy/mutating/patch"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/meridian-cp/meridian/lib/kube/celenv"
	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/internal/admissionmetrics"
	"github.com/meridian-cp/meridian/services/admission/internal/policy"
)

// mutatingPolicy is one MutatingAdmissionPolicy, compiled once as
// kube-apiserver's plugin compiles it.
type mutatingPolicy struct {
	obj      *admissionregistrationv1.MutatingAdmissionPolicy
	match    *matcher
	cond     matchconditions.Matcher // nil without matchConditions
	patchers []patch.Patcher
	params   *paramSource
	err      error
}

func compileMutating(p *admissionregistrationv1.MutatingAdmissionPolicy, params func(*admissionregistrationv1.ParamKind) (*paramSource, error)) *mutatingPolicy {
	mp := &mutatingPolicy{obj: p}
	cc, err := compileCommon(p.Name, p.Spec.MatchConstraints, p.Spec.ParamKind, p.Spec.Variables, p.Spec.MatchConditions, p.Spec.FailurePolicy, params)
	mp.match, mp.params, mp.cond = cc.match, cc.params, cc.conditions
	if err != nil {
		mp.err = err
		return mp
	}
	c, opts := cc.compiler, cc.opts
	popts := opts
	popts.HasPatchTypes = true
	for _, m := range p.Spec.Mutations {
		switch {
		case m.PatchType == admissionregistrationv1.PatchTypeJSONPatch && m.JSONPatch != nil:
			mp.patchers = append(mp.patchers, patch.NewJSONPatcher(c.CompileMutatingEvaluator(&patch.JSONPatchCondition{Expression: m.JSONPatch.Expression}, popts, environment.StoredExpressions)))
		case m.PatchType == admissionregistrationv1.PatchTypeApplyConfiguration && m.ApplyConfiguration != nil:
			mp.patchers = append(mp.patchers, patch.NewApplyConfigurationPatcher(c.CompileMutatingEvaluator(&patch.ApplyConfigurationCondition{Expression: m.ApplyConfiguration.Expression}, popts, environment.StoredExpressions)))
		}
	}
	return mp
}

func (p *mutatingPolicy) ignoreFailure() bool {
	return p.obj.Spec.FailurePolicy != nil && *p.obj.Spec.FailurePolicy == admissionregistrationv1.Ignore
}

// mutatingBinding is one binding of one policy matching a request.
type mutatingBinding struct {
	policy  *mutatingPolicy
	binding *admissionregistrationv1.MutatingAdmissionPolicyBinding
}

// mutatingChain runs every MutatingAdmissionPolicy binding matching one
// request, in order, as one Policy of the pipeline (so it runs before the
// validating policies): each sees the object as the ones before it left
// it. It is a policy.Reinvocable: Evaluate records which bindings with
// reinvocationPolicy IfNeeded had their output changed after they ran,
// and Reinvoke runs them once more. A Decision carries the final object.
type mutatingChain struct {
	req      *request
	bindings []mutatingBinding
	oi       admission.ObjectInterfaces
	tc       managedfields.TypeConverter
	metrics  *admissionmetrics.Metrics // nil: none

	// invoked are the IfNeeded bindings run since the object last
	// changed; reinvoke those to run again in the reinvocation pass.
	invoked, reinvoke []bool
	// output is the object (JSON) as this chain last returned it.
	output []byte
}

var _ policy.Reinvocable = (*mutatingChain)(nil)

// Mutating reports true: a policy.Union runs it before every validating
// policy.
func (m *mutatingChain) Mutating() bool { return true }

// Evaluate applies every binding's mutations. A mutation that fails
// denies the request under failurePolicy Fail and is skipped under
// Ignore.
func (m *mutatingChain) Evaluate(ctx context.Context, req *admissionv1.AdmitRequest) (policy.Decision, error) {
	m.invoked, m.reinvoke = make([]bool, len(m.bindings)), make([]bool, len(m.bindings))
	return m.run(ctx, req, false)
}

// Reinvoke applies again the mutations of the IfNeeded bindings whose
// output was changed after they ran: by a later binding, or by any other
// mutating policy or webhook (the object is not the one Evaluate
// returned).
func (m *mutatingChain) Reinvoke(ctx context.Context, req *admissionv1.AdmitRequest) (policy.Decision, error) {
	if !bytes.Equal(req.GetObject(), m.output) {
		m.changed()
	}
	return m.run(ctx, req, true)
}

// changed marks the bindings run since the last change for
// reinvocation.
func (m *mutatingChain) changed() {
	for i, ran := range m.invoked {
		if ran {
			m.reinvoke[i], m.invoked[i] = true, false
		}
	}
}

// run applies the bindings' mutations in order: every binding, or with
// reinvoking only those marked for reinvocation.
func (m *mutatingChain) run(ctx context.Context, req *admissionv1.AdmitRequest, reinvoking bool) (policy.Decision, error) {
	m.output = req.GetObject()
	a, err := m.req.attributes(req)
	if err != nil {
		return policy.Decision{}, err
	}
	va := a.versioned
	if va.VersionedObject.Object() == nil {
		return policy.Decision{}, nil
	}
	start := va.VersionedObject.Object().DeepCopyObject()
	for i, b := range m.bindings {
		if reinvoking && !m.reinvoke[i] {
			continue
		}
		m.reinvoke[i] = false
		before := va.VersionedObject.Object().DeepCopyObject()
		if d, stop := m.invoke(ctx, b, a); stop {
			return d, ctx.Err()
		}
		if !equality.Semantic.DeepEqual(before, va.VersionedObject.Object()) {
			m.changed()
		}
		if b.policy.obj.Spec.ReinvocationPolicy == admissionregistrationv1.IfNeededReinvocationPolicy {
			m.invoked[i] = true
		}
	}
	if equality.Semantic.DeepEqual(start, va.VersionedObject.Object()) {
		return policy.Decision{}, nil
	}
	js, err := json.Marshal(va.VersionedObject.Object())
	if err != nil {
		return policy.Decision{}, fmt.Errorf("encoding the mutated object: %w", err)
	}
	m.output = js
	return policy.Decision{Object: js}, nil
}

// invoke runs one binding's mutations over a's object; stop is true when
// the request is denied (d says why) or ctx ended.
func (m *mutatingChain) invoke(ctx context.Context, b mutatingBinding, a *attributes) (d policy.Decision, stop bool) {
	fail := func(err error) (policy.Decision, bool) {
		if b.policy.ignoreFailure() || ctx.Err() != nil {
			return policy.Decision{}, ctx.Err() != nil
		}
		msg := fmt.Sprintf("policy '%s' with binding '%s' denied request: %v", b.policy.obj.Name, b.binding.Name, err)
		return policy.Decision{Denial: &policy.Denial{Code: http.StatusUnprocessableEntity, Reason: string(metav1.StatusReasonInvalid), Message: forbiddenMessage(a, msg)}}, true
	}
	if b.policy.err != nil {
		return fail(fmt.Errorf("failed to configure policy: %w", b.policy.err))
	}
	params, err := b.policy.params.collect(b.binding.Spec.ParamRef, a)
	if err != nil {
		return fail(fmt.Errorf("failed to configure binding: %w", err))
	}
	ns := m.req.namespace()
	for _, param := range params {
		if b.policy.cond != nil {
			res := b.policy.cond.Match(ctx, a.versioned, param, m.req.authz)
			if res.Error != nil {
				return fail(res.Error)
			}
			if !res.Matches {
				continue
			}
		}
		for _, p := range b.policy.patchers {
			start := time.Now()
			obj, err := p.Patch(ctx, patch.Request{
				MatchedResource:     a.GetResource(),
				VersionedAttributes: a.versioned,
				ObjectInterfaces:    m.oi,
				OptionalVariables:   plugincel.OptionalVariableBindings{VersionedParams: param, Authorizer: m.req.authz},
				Namespace:           ns,
				TypeConverter:       m.tc,
			}, celenv.RuntimeBudget)
			m.metrics.ObserveMutation(b.policy.obj.Name, b.binding.Name, err, time.Since(start))
			if err != nil {
				return fail(err)
			}
			a.versioned.UpdateObject(obj)
		}
	}
	return policy.Decision{}, false
}

// newObjectInterfaces are the object interfaces the patchers use: every
// object here is unstructured, so an empty scheme serves.
func newObjectInterfaces() admission.ObjectInterfaces {
	return admission.NewObjectInterfacesFromScheme(runtime.NewScheme())
}
