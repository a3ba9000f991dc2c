// Package celpolicy is the admission service's CEL policies:
// ValidatingAdmissionPolicies and MutatingAdmissionPolicies with their
// bindings, and the param objects and namespaces they read, followed from
// the store. Each policy is compiled once, when it changes, against
// lib/kube/celenv through k8s.io/apiserver's admission CEL libraries (the
// same variables, cost budgets, messages and failure handling as
// kube-apiserver's plugins). ValidatingAdmissionPolicies are evaluated by
// validate, which decides as kube-apiserver's validator but converts the
// request to CEL values once per request, not once per policy. Set is a policy.Set: for a request it
// returns one Policy running every matching mutating binding (in name
// order of policy, then binding), then one per matching validating
// binding.
package celpolicy

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/meridian-cp/meridian/lib/kube/rbac"
	"github.com/meridian-cp/meridian/lib/kube/registry"
	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/internal/admissionmetrics"
	"github.com/meridian-cp/meridian/services/admission/internal/policy"
	"github.com/meridian-cp/meridian/services/admission/internal/storecache"
)

// Config configures a Set.
type Config struct {
	// Store holds the objects. Required.
	Store Store
	// Decrypt, when set, turns stored values into encoded objects (values
	// encrypted at rest); nil reads values as they are.
	Decrypt Decrypt
	// Logger; nil means slog.Default().
	Logger *slog.Logger
	// Metrics receives each ValidatingAdmissionPolicy check; nil: none.
	Metrics *admissionmetrics.Metrics
	// Authorizer answers the CEL `authorizer` variables for the
	// requesting user (the RBAC authorizer, lib/kube/rbac); nil allows
	// system:masters only, as an RBAC policy without objects.
	Authorizer authorizer.UnconditionalAuthorizer
}

// Set is the CEL policies followed from the store. It implements
// policy.Set; Matching and Scope are safe for concurrent use.
type Set struct {
	cache    *storecache.Cache
	logger   *slog.Logger
	metrics  *admissionmetrics.Metrics // nil: none
	authz    authorizer.UnconditionalAuthorizer
	registry *registry.Registry
	oi       admission.ObjectInterfaces
	tc       managedfields.TypeConverter

	resources struct {
		vap, vapb, map_, mapb, namespaces *registry.Resource
	}

	rebuildMu sync.Mutex                 // one rebuild at a time
	compiled  map[string]compiledVersion // policy key → compiled at a resourceVersion
	state     atomic.Pointer[state]
}

type compiledVersion struct {
	rv         string
	validating *validatingPolicy
	mutating   *mutatingPolicy
}

// state is one version of the policy set; it is never modified once
// published.
type state struct {
	validating []validatingEntry
	mutating   []mutatingEntry
	scope      policy.Scope
	changed    chan struct{}   // closed when the next state is published
	shared     map[string]bool // sharedKeys(validating)
	matches    matchCache      // the bindings whose rules cover a request
}

type validatingEntry struct {
	policy   *validatingPolicy
	bindings []*admissionregistrationv1.ValidatingAdmissionPolicyBinding
	matchers []*matcher
	checks   []*admissionmetrics.PolicyCheck // each binding's check metrics
}

type mutatingEntry struct {
	policy   *mutatingPolicy
	bindings []*admissionregistrationv1.MutatingAdmissionPolicyBinding
	matchers []*matcher
}

// New returns a Set following the store until ctx ends, and a channel
// closed once its policies, bindings and namespaces have been read.
func New(ctx context.Context, cfg Config) (*Set, <-chan struct{}, error) {
	if cfg.Store == nil {
		return nil, nil, fmt.Errorf("celpolicy: a Store is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Authorizer == nil {
		cfg.Authorizer = rbac.NewStatic()
	}
	reg := registry.New(registry.Standard()...)
	s := &Set{logger: cfg.Logger, metrics: cfg.Metrics, authz: cfg.Authorizer, registry: reg, oi: newObjectInterfaces(), tc: newTypeConverter(reg), compiled: map[string]compiledVersion{}}
	gv := admissionregistrationv1.SchemeGroupVersion
	lookup := func(gvr schema.GroupVersionResource) *registry.Resource {
		r, _ := reg.Lookup(gvr)
		return r
	}
	s.resources.vap = lookup(gv.WithResource("validatingadmissionpolicies"))
	s.resources.vapb = lookup(gv.WithResource("validatingadmissionpolicybindings"))
	s.resources.map_ = lookup(gv.WithResource("mutatingadmissionpolicies"))
	s.resources.mapb = lookup(gv.WithResource("mutatingadmissionpolicybindings"))
	s.resources.namespaces = lookup(corev1.SchemeGroupVersion.WithResource("namespaces"))
	s.state.Store(&state{changed: make(chan struct{})})
	c, err := storecache.New(ctx, cfg.Store, cfg.Decrypt, cfg.Logger, s.onChange)
	if err != nil {
		return nil, nil, err
	}
	s.cache = c
	synced := make(chan struct{})
	waits := []<-chan struct{}{
		c.Follow(s.resources.namespaces), c.Follow(s.resources.vap), c.Follow(s.resources.vapb),
		c.Follow(s.resources.map_), c.Follow(s.resources.mapb),
	}
	go func() {
		for _, w := range waits {
			select {
			case <-w:
			case <-ctx.Done():
				return
			}
		}
		close(synced)
	}()
	return s, synced, nil
}

// onChange rebuilds the set after a change of policies or bindings;
// namespaces and params are read at evaluation.
func (s *Set) onChange(res *registry.Resource) {
	switch res {
	case s.resources.vap, s.resources.vapb, s.resources.map_, s.resources.mapb:
		s.rebuild()
	}
}

// paramSource returns where params of kind pk come from, following its
// resource from now on.
func (s *Set) paramSource(pk *admissionregistrationv1.ParamKind) (*paramSource, error) {
	gv, err := schema.ParseGroupVersion(pk.APIVersion)
	if err != nil {
		return nil, err
	}
	for _, r := range s.registry.Resources(gv) {
		if r.Kind == pk.Kind {
			s.cache.Follow(r)
			return &paramSource{kind: pk, res: r, cache: s.cache}, nil
		}
	}
	return nil, fmt.Errorf("paramKind kind `%s` not known", gv.WithKind(pk.Kind).String())
}

// rebuild compiles what changed and publishes the new state.
func (s *Set) rebuild() {
	s.rebuildMu.Lock()
	defer s.rebuildMu.Unlock()
	seen := map[string]bool{}
	next := &state{changed: make(chan struct{})}

	vbindings := map[string][]*admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	for _, o := range s.cache.List(s.resources.vapb, "", nil) {
		b := o.(*admissionregistrationv1.ValidatingAdmissionPolicyBinding)
		vbindings[b.Spec.PolicyName] = append(vbindings[b.Spec.PolicyName], b)
	}
	for _, o := range sortedByName(s.cache.List(s.resources.vap, "", nil)) {
		p := o.(*admissionregistrationv1.ValidatingAdmissionPolicy)
		key := "v/" + p.Name
		seen[key] = true
		cv, ok := s.compiled[key]
		if !ok || cv.rv != p.ResourceVersion {
			cv = compiledVersion{rv: p.ResourceVersion, validating: compileValidating(p, s.paramSource)}
			s.compiled[key] = cv
		}
		bs := vbindings[p.Name]
		if len(bs) == 0 {
			continue
		}
		e := validatingEntry{policy: cv.validating}
		for _, b := range sortedBindings(bs) {
			m, err := newMatcher(b.Spec.MatchResources)
			if err != nil {
				s.logger.Warn("admission policies: a binding's matchResources do not compile; left out", "binding", b.Name, "error", err)
				continue
			}
			e.bindings, e.matchers = append(e.bindings, b), append(e.matchers, m)
			e.checks = append(e.checks, s.metrics.PolicyCheck(p.Name, b.Name))
		}
		next.validating = append(next.validating, e)
		next.scope.Rules = append(next.scope.Rules, scopeRules(p.Spec.MatchConstraints)...)
	}

	mbindings := map[string][]*admissionregistrationv1.MutatingAdmissionPolicyBinding{}
	for _, o := range s.cache.List(s.resources.mapb, "", nil) {
		b := o.(*admissionregistrationv1.MutatingAdmissionPolicyBinding)
		mbindings[b.Spec.PolicyName] = append(mbindings[b.Spec.PolicyName], b)
	}
	for _, o := range sortedByName(s.cache.List(s.resources.map_, "", nil)) {
		p := o.(*admissionregistrationv1.MutatingAdmissionPolicy)
		key := "m/" + p.Name
		seen[key] = true
		cv, ok := s.compiled[key]
		if !ok || cv.rv != p.ResourceVersion {
			cv = compiledVersion{rv: p.ResourceVersion, mutating: compileMutating(p, s.paramSource)}
			s.compiled[key] = cv
		}
		bs := mbindings[p.Name]
		if len(bs) == 0 {
			continue
		}
		e := mutatingEntry{policy: cv.mutating}
		slices.SortFunc(bs, func(a, b *admissionregistrationv1.MutatingAdmissionPolicyBinding) int {
			return strings.Compare(a.Name, b.Name)
		})
		for _, b := range bs {
			m, err := newMatcher(b.Spec.MatchResources)
			if err != nil {
				s.logger.Warn("admission policies: a binding's matchResources do not compile; left out", "binding", b.Name, "error", err)
				continue
			}
			e.bindings, e.matchers = append(e.bindings, b), append(e.matchers, m)
		}
		next.mutating = append(next.mutating, e)
		next.scope.Rules = append(next.scope.Rules, scopeRules(p.Spec.MatchConstraints)...)
	}
	next.shared = sharedKeys(next.validating)
	next.matches.byName = next.namesRules()
	for k := range s.compiled {
		if !seen[k] {
			delete(s.compiled, k)
		}
	}
	// Publish the new state (its wider scope included) before closing the
	// old one's channel, so scope watchers read the new scope.
	prev := s.state.Swap(next)
	close(prev.changed)
	s.logger.Debug("admission policies applied", "validating", len(next.validating), "mutating", len(next.mutating))
}

// scopeRules are the pipeline scope of a policy's match constraints: its
// resource rules without versions (see policy.Scope). A policy without
// constraints matches nothing.
func scopeRules(m *admissionregistrationv1.MatchResources) []policy.Rule {
	if m == nil {
		return nil
	}
	var out []policy.Rule
	for _, r := range m.ResourceRules {
		var ops []admissionv1.Operation
		for _, op := range r.Operations {
			switch op {
			case admissionregistrationv1.Create:
				ops = append(ops, admissionv1.Operation_OPERATION_CREATE)
			case admissionregistrationv1.Update:
				ops = append(ops, admissionv1.Operation_OPERATION_UPDATE)
			case admissionregistrationv1.Delete:
				ops = append(ops, admissionv1.Operation_OPERATION_DELETE)
			case admissionregistrationv1.Connect:
				ops = append(ops, admissionv1.Operation_OPERATION_CONNECT)
			}
		}
		if slices.Contains(r.Operations, admissionregistrationv1.OperationAll) {
			ops = nil // every operation
		}
		out = append(out, policy.Rule{Operations: ops, APIGroups: r.APIGroups, Resources: r.Resources})
	}
	return out
}

// Scope returns the current scope and a channel closed when it changes.
func (s *Set) Scope() (policy.Scope, <-chan struct{}) {
	st := s.state.Load()
	return st.scope, st.changed
}

// Matching returns, for req, one Policy running the matching mutating
// bindings, then one per matching validating binding. A request whose
// objects do not decode gets one Policy denying it.
func (s *Set) Matching(req *admissionv1.AdmitRequest) []policy.Policy {
	st := s.state.Load()
	if len(st.validating) == 0 && len(st.mutating) == 0 {
		return nil
	}
	// kube-apiserver exempts its admission configuration kinds from
	// admission policies, so a bad policy can always be fixed.
	if exemptKind(req.GetKind()) {
		return nil
	}
	// The bindings whose rules cover the request, from what it says
	// without its objects; the request is decoded only when there are any.
	cands := st.candidates(req)
	if len(cands.validating) == 0 && len(cands.mutating) == 0 {
		return nil
	}
	r := &request{set: s, authz: s.authz, shared: st.shared}
	a, err := r.attributes(req)
	if err != nil {
		return []policy.Policy{badRequest{err}}
	}
	ns := r.namespace()
	out := make([]policy.Policy, 0, len(cands.validating)+1)
	// The validating invocations of the request, allocated together; at
	// most one per candidate, so invs never grows and out may point into it.
	invs := make([]validatingInvocation, 0, len(cands.validating))
	var chain *mutatingChain
	for _, c := range cands.mutating {
		e := &st.mutating[c.entry]
		if e.policy.match != nil && !e.policy.match.matchesSelectors(a, ns) || !e.matchers[c.binding].matchesSelectors(a, ns) {
			continue
		}
		if chain == nil {
			chain = &mutatingChain{req: r, oi: s.oi, tc: s.tc, metrics: s.metrics}
			out = append(out, chain)
		}
		chain.bindings = append(chain.bindings, mutatingBinding{policy: e.policy, binding: e.bindings[c.binding]})
	}
	for _, c := range cands.validating {
		e := &st.validating[c.entry]
		if e.policy.match != nil && !e.policy.match.matchesSelectors(a, ns) || !e.matchers[c.binding].matchesSelectors(a, ns) {
			continue
		}
		invs = append(invs, validatingInvocation{req: r, policy: e.policy, binding: e.bindings[c.binding], metrics: e.checks[c.binding]})
		out = append(out, &invs[len(invs)-1])
	}
	return out
}

var _ policy.Set = (*Set)(nil)

// request is what the policies of one request share: its decoded
// attributes (decoded again for the request a mutation produced) and its
// namespace.
type request struct {
	set    *Set
	authz  authorizer.UnconditionalAuthorizer
	shared map[string]bool // the memoKeys whose values are kept (celInput.shared)

	mu    sync.Mutex
	req   *admissionv1.AdmitRequest
	attrs *attributes
	err   error
	ns    *corev1.Namespace
	nsSet bool
	in    *celInput // for attrs; nil until a validating policy needs it
}

// attributes returns req decoded.
func (r *request) attributes(req *admissionv1.AdmitRequest) (*attributes, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if req != r.req {
		r.req = req
		r.attrs, r.err = newAttributes(req)
		r.in = nil
	}
	return r.attrs, r.err
}

// Namespace returns the namespace name as last read from the store; nil
// when there is none or it has not been read yet. The webhooks'
// namespaceSelectors read it here too, so the service follows the
// namespaces once.
func (s *Set) Namespace(name string) *corev1.Namespace {
	ns, _ := s.cache.Get(s.resources.namespaces, "", name).(*corev1.Namespace)
	return ns
}

// namespace returns the request's namespace object, nil for a
// cluster-scoped request, a Namespace itself, or a namespace not read yet.
func (r *request) namespace() *corev1.Namespace {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nsSet || r.attrs == nil {
		return r.ns
	}
	r.nsSet = true
	a := r.attrs
	name := a.GetNamespace()
	if k := a.GetKind(); k.Group == "" && k.Kind == "Namespace" {
		name = ""
	}
	if name != "" {
		r.ns = r.set.Namespace(name)
	}
	return r.ns
}

// celInput returns the CEL values of the request's current attributes
// (see attributes), built on first use.
func (r *request) celInput() (*celInput, error) {
	ns := r.namespace()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.attrs == nil {
		return nil, r.err
	}
	if r.in == nil {
		in, err := newCELInput(r.attrs, ns, r.authz)
		if err != nil {
			return nil, err
		}
		in.shared = r.shared
		r.in = in
	}
	return r.in, nil
}

// badRequest denies a request whose objects do not decode.
type badRequest struct{ err error }

func (b badRequest) Evaluate(context.Context, *admissionv1.AdmitRequest) (policy.Decision, error) {
	return policy.Decision{}, fmt.Errorf("admission policies: decoding the request: %w", b.err)
}

// sortedByName sorts objects of one kind by name.
func sortedByName(objs []runtime.Object) []runtime.Object {
	name := func(o runtime.Object) string { return o.(metav1.Object).GetName() }
	sort.Slice(objs, func(i, j int) bool { return name(objs[i]) < name(objs[j]) })
	return objs
}

func sortedBindings(bs []*admissionregistrationv1.ValidatingAdmissionPolicyBinding) []*admissionregistrationv1.ValidatingAdmissionPolicyBinding {
	slices.SortFunc(bs, func(a, b *admissionregistrationv1.ValidatingAdmissionPolicyBinding) int {
		return strings.Compare(a.Name, b.Name)
	})
	return bs
}
