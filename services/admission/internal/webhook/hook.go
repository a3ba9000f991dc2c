package webhook

import (
	"fmt"
	"slices"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/admission"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/meridian-cp/meridian/lib/kube/celenv"
	kubewebhook "github.com/meridian-cp/meridian/lib/kube/webhook"
)

// hook is one webhook of a configuration, compiled once when the
// configuration changes.
type hook struct {
	// name is the webhook's name; config its configuration's, rv the
	// configuration's resourceVersion.
	name, config, rv string
	mutating         bool
	client           kubewebhook.ClientConfig
	rules            []admissionregistrationv1.RuleWithOperations
	nsSel            labels.Selector
	objSel           labels.Selector
	cond             matchconditions.Matcher // nil without matchConditions
	// ignore is failurePolicy: Ignore.
	ignore bool
	// dryRunSafe is sideEffects None or NoneOnDryRun.
	dryRunSafe bool
	timeout    time.Duration
	// reinvoke is reinvocationPolicy: IfNeeded.
	reinvoke bool
	// version is the AdmissionReview version sent; "" when the webhook
	// accepts none meridian speaks (every call then fails).
	version string
	// err is why the webhook could not be compiled: every request it
	// could match then fails as its failurePolicy says.
	err error
}

// common is what validating and mutating webhooks share.
type common struct {
	name                 string
	client               admissionregistrationv1.WebhookClientConfig
	rules                []admissionregistrationv1.RuleWithOperations
	failurePolicy        *admissionregistrationv1.FailurePolicyType
	matchPolicy          *admissionregistrationv1.MatchPolicyType
	nsSel, objSel        *metav1.LabelSelector
	sideEffects          *admissionregistrationv1.SideEffectClass
	timeoutSeconds       *int32
	reviewVersions       []string
	matchConditions      []admissionregistrationv1.MatchCondition
	reinvocationIfNeeded bool
}

// compileValidating compiles a ValidatingWebhookConfiguration's webhooks.
func compileValidating(c *admissionregistrationv1.ValidatingWebhookConfiguration) []*hook {
	out := make([]*hook, 0, len(c.Webhooks))
	for _, w := range c.Webhooks {
		out = append(out, compile(c.ObjectMeta, false, common{
			name: w.Name, client: w.ClientConfig, rules: w.Rules, failurePolicy: w.FailurePolicy, matchPolicy: w.MatchPolicy,
			nsSel: w.NamespaceSelector, objSel: w.ObjectSelector, sideEffects: w.SideEffects, timeoutSeconds: w.TimeoutSeconds,
			reviewVersions: w.AdmissionReviewVersions, matchConditions: w.MatchConditions,
		}))
	}
	return out
}

// compileMutating compiles a MutatingWebhookConfiguration's webhooks.
func compileMutating(c *admissionregistrationv1.MutatingWebhookConfiguration) []*hook {
	out := make([]*hook, 0, len(c.Webhooks))
	for _, w := range c.Webhooks {
		out = append(out, compile(c.ObjectMeta, true, common{
			name: w.Name, client: w.ClientConfig, rules: w.Rules, failurePolicy: w.FailurePolicy, matchPolicy: w.MatchPolicy,
			nsSel: w.NamespaceSelector, objSel: w.ObjectSelector, sideEffects: w.SideEffects, timeoutSeconds: w.TimeoutSeconds,
			reviewVersions: w.AdmissionReviewVersions, matchConditions: w.MatchConditions,
			reinvocationIfNeeded: w.ReinvocationPolicy != nil && *w.ReinvocationPolicy == admissionregistrationv1.IfNeededReinvocationPolicy,
		}))
	}
	return out
}

// compile builds one hook; the v1 defaults (failurePolicy Fail,
// matchPolicy Equivalent, timeout 10s, selectors matching everything)
// apply to fields left unset.
func compile(config metav1.ObjectMeta, mutating bool, w common) *hook {
	h := &hook{
		name: w.name, config: config.Name, rv: config.ResourceVersion, mutating: mutating,
		ignore:     w.failurePolicy != nil && *w.failurePolicy == admissionregistrationv1.Ignore,
		dryRunSafe: w.sideEffects != nil && (*w.sideEffects == admissionregistrationv1.SideEffectClassNone || *w.sideEffects == admissionregistrationv1.SideEffectClassNoneOnDryRun),
		timeout:    kubewebhook.DefaultTimeout,
		reinvoke:   w.reinvocationIfNeeded,
		version:    reviewVersion(w.reviewVersions),
		nsSel:      labels.Everything(), objSel: labels.Everything(),
	}
	if w.timeoutSeconds != nil {
		h.timeout = time.Duration(*w.timeoutSeconds) * time.Second
	}
	h.client = kubewebhook.ClientConfig{CABundle: w.client.CABundle}
	if w.client.URL != nil {
		h.client.URL = *w.client.URL
	}
	if s := w.client.Service; s != nil {
		ref := &kubewebhook.ServiceReference{Namespace: s.Namespace, Name: s.Name}
		if s.Path != nil {
			ref.Path = *s.Path
		}
		if s.Port != nil {
			ref.Port = *s.Port
		}
		h.client.Service = ref
	}
	h.rules = w.rules
	if w.matchPolicy == nil || *w.matchPolicy == admissionregistrationv1.Equivalent {
		// meridian serves each resource at one version, so every version
		// a rule names of a served group and resource is equivalent.
		h.rules = make([]admissionregistrationv1.RuleWithOperations, len(w.rules))
		for i, r := range w.rules {
			r.APIVersions = []string{"*"}
			h.rules[i] = r
		}
	}
	var err error
	if w.nsSel != nil {
		if h.nsSel, err = metav1.LabelSelectorAsSelector(w.nsSel); err != nil {
			h.err = fmt.Errorf("namespaceSelector: %w", err)
			return h
		}
	}
	if w.objSel != nil {
		if h.objSel, err = metav1.LabelSelectorAsSelector(w.objSel); err != nil {
			h.err = fmt.Errorf("objectSelector: %w", err)
			return h
		}
	}
	if len(w.matchConditions) > 0 {
		c, err := plugincel.NewCompositedCompiler(celenv.Base())
		if err != nil {
			h.err = err
			return h
		}
		acc := make([]plugincel.ExpressionAccessor, len(w.matchConditions))
		for i := range w.matchConditions {
			acc[i] = (*matchconditions.MatchCondition)(&w.matchConditions[i])
		}
		opts := plugincel.OptionalVariableDeclarations{HasAuthorizer: true}
		kind := "validating"
		if mutating {
			kind = "mutating"
		}
		h.cond = matchconditions.NewMatcher(c.CompileCondition(acc, opts, environment.StoredExpressions), w.failurePolicy, "webhook", kind, w.name)
	}
	return h
}

// matchesRules reports whether a rule of h covers the request a.
func (h *hook) matchesRules(a admission.Attributes) bool {
	return slices.ContainsFunc(h.rules, func(r admissionregistrationv1.RuleWithOperations) bool {
		return (&rules.Matcher{Rule: r, Attr: a}).Matches()
	})
}
