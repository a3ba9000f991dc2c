// Package webhook is the admission service's admission webhooks:
// ValidatingWebhookConfigurations and MutatingWebhookConfigurations,
// called over HTTPS (lib/kube/webhook) with an AdmissionReview as
// kube-apiserver calls them.
//
// Set is a policy.Set. For a request it returns one Policy running every
// matching mutating webhook in order (configurations by name, webhooks
// in their order), each seeing the object the ones before it made, and
// reinvoking once those with reinvocationPolicy IfNeeded when a later one
// changed the object; then one Policy calling every matching validating
// webhook in parallel. A webhook matches when a rule covers the request
// (matchPolicy Equivalent: any version of the resource), its
// namespaceSelector the request's namespace, its objectSelector the
// object or the old object, and its matchConditions (CEL, lib/kube/celenv)
// hold. A dry run that reaches a webhook whose sideEffects are not None or
// NoneOnDryRun is refused with 400. A call that fails or times out (each
// costs at most the webhook's timeoutSeconds) is skipped under
// failurePolicy Ignore (and recorded as a failed-open audit annotation)
// and refuses the request with 500 under Fail. A denial carries the
// webhook's code and message, as kube-apiserver's: `admission webhook
// "<name>" denied the request: <message>`. Warnings reach the client's
// Warning headers; audit annotations are keyed <webhook>/<key>.
//
// The configurations themselves are exempt, as kube-apiserver exempts
// them, so that a broken webhook can always be removed.
package webhook

import (
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/admission/plugin/webhook/predicates/rules"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	kubewebhook "github.com/meridian-cp/meridian/lib/kube/webhook"
	admitv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/internal/admissionmetrics"
	"github.com/meridian-cp/meridian/services/admission/internal/policy"
)

// Namespaces looks namespaces up for namespaceSelectors: the namespace
// named name, nil when it is not known.
type Namespaces func(name string) *corev1.Namespace

// Config configures a Set.
type Config struct {
	// Client calls the webhooks; nil means a new one with default
	// options.
	Client *kubewebhook.Client
	// Namespaces looks up a request's namespace; nil knows none (a
	// namespaceSelector then sees a namespace without labels).
	Namespaces Namespaces
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Metrics receives each call's duration and rejection; nil: none.
	Metrics *admissionmetrics.Metrics
	// Authorizer answers the CEL `authorizer` variables of
	// matchConditions for the requesting user (the RBAC authorizer,
	// lib/kube/rbac); nil leaves them unset, so that a condition using
	// them fails as the webhook's failurePolicy says.
	Authorizer authorizer.Authorizer
}

// Set is the webhooks of the configurations it was given. Matching and
// Scope are safe for concurrent use, and so are the updates.
type Set struct {
	cfg Config

	mu struct {
		sync.Mutex
		validating map[string][]*hook // by configuration name
		mutating   map[string][]*hook
	}
	state atomic.Pointer[state]
}

// state is one version of the set; never modified once published.
type state struct {
	validating, mutating []*hook
	scope                policy.Scope
	changed              chan struct{} // closed when the next state is published
}

// New returns an empty Set.
func New(cfg Config) *Set {
	if cfg.Client == nil {
		cfg.Client = kubewebhook.New(kubewebhook.Options{})
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Set{cfg: cfg}
	s.mu.validating = map[string][]*hook{}
	s.mu.mutating = map[string][]*hook{}
	s.state.Store(&state{changed: make(chan struct{})})
	return s
}

// PutValidating adds or replaces a ValidatingWebhookConfiguration.
func (s *Set) PutValidating(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.validating[c.Name] = compileValidating(c)
	s.publishLocked()
}

// PutMutating adds or replaces a MutatingWebhookConfiguration.
func (s *Set) PutMutating(c *admissionregistrationv1.MutatingWebhookConfiguration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.mutating[c.Name] = compileMutating(c)
	s.publishLocked()
}

// Delete removes the configuration of that name (mutating or not).
func (s *Set) Delete(mutating bool, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if mutating {
		delete(s.mu.mutating, name)
	} else {
		delete(s.mu.validating, name)
	}
	s.publishLocked()
}

// Load makes the set exactly these configurations. A configuration whose
// resourceVersion is the one last loaded is not compiled again.
func (s *Set) Load(validating []*admissionregistrationv1.ValidatingWebhookConfiguration, mutating []*admissionregistrationv1.MutatingWebhookConfiguration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vs, ms := map[string][]*hook{}, map[string][]*hook{}
	for _, c := range validating {
		if hs, ok := s.mu.validating[c.Name]; ok && c.ResourceVersion != "" && len(hs) > 0 && hs[0].rv == c.ResourceVersion {
			vs[c.Name] = hs
			continue
		}
		vs[c.Name] = compileValidating(c)
	}
	for _, c := range mutating {
		if hs, ok := s.mu.mutating[c.Name]; ok && c.ResourceVersion != "" && len(hs) > 0 && hs[0].rv == c.ResourceVersion {
			ms[c.Name] = hs
			continue
		}
		ms[c.Name] = compileMutating(c)
	}
	s.mu.validating, s.mu.mutating = vs, ms
	s.publishLocked()
}

// publishLocked publishes the configurations as a new state: ordered by
// configuration name, as kube-apiserver orders them. The scope is
// published with the hooks, so it is never narrower than what Matching
// returns.
func (s *Set) publishLocked() {
	st := &state{validating: ordered(s.mu.validating), mutating: ordered(s.mu.mutating), changed: make(chan struct{})}
	for _, h := range slices.Concat(st.mutating, st.validating) {
		for _, r := range h.rules {
			st.scope.Rules = append(st.scope.Rules, scopeRule(r))
		}
	}
	old := s.state.Swap(st)
	close(old.changed)
}

func ordered(byConfig map[string][]*hook) []*hook {
	names := make([]string, 0, len(byConfig))
	for n := range byConfig {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []*hook
	for _, n := range names {
		out = append(out, byConfig[n]...)
	}
	return out
}

// scopeRule is r without its versions.
func scopeRule(r admissionregistrationv1.RuleWithOperations) policy.Rule {
	out := policy.Rule{APIGroups: r.APIGroups, Resources: r.Resources}
	for _, op := range r.Operations {
		switch op {
		case admissionregistrationv1.Create:
			out.Operations = append(out.Operations, admitv1.Operation_OPERATION_CREATE)
		case admissionregistrationv1.Update:
			out.Operations = append(out.Operations, admitv1.Operation_OPERATION_UPDATE)
		case admissionregistrationv1.Delete:
			out.Operations = append(out.Operations, admitv1.Operation_OPERATION_DELETE)
		case admissionregistrationv1.Connect:
			out.Operations = append(out.Operations, admitv1.Operation_OPERATION_CONNECT)
		default: // "*"
			return policy.Rule{APIGroups: r.APIGroups, Resources: r.Resources}
		}
	}
	return out
}

// Scope returns the rules of every webhook and a channel closed when the
// set changes.
func (s *Set) Scope() (policy.Scope, <-chan struct{}) {
	st := s.state.Load()
	return st.scope, st.changed
}

// Matching returns one Policy running the mutating webhooks that match
// req, then one calling the validating ones, each only when some match.
// A request whose objects do not decode gets a Policy that fails.
func (s *Set) Matching(req *admitv1.AdmitRequest) []policy.Policy {
	st := s.state.Load()
	if len(st.validating) == 0 && len(st.mutating) == 0 {
		return nil
	}
	a, err := attributes(req, req.GetObject())
	if err != nil {
		return []policy.Policy{failing{err}}
	}
	if rules.IsExemptAdmissionConfigurationResource(a) {
		return nil
	}
	var ns *corev1.Namespace
	if name := a.GetNamespace(); name != "" && s.cfg.Namespaces != nil {
		ns = s.cfg.Namespaces(name)
	}
	var out []policy.Policy
	if hs := s.matching(st.mutating, a, ns); len(hs) > 0 {
		out = append(out, &mutatingPolicy{set: s, hooks: hs})
	}
	if hs := s.matching(st.validating, a, ns); len(hs) > 0 {
		out = append(out, &validatingPolicy{set: s, hooks: hs})
	}
	return out
}

var _ policy.Set = (*Set)(nil)
