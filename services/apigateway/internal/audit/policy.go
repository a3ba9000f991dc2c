// Package audit records what the API is asked and answers, as
// kube-apiserver's auditing does: an audit.k8s.io/v1 Policy decides, per
// request, at which level (None, Metadata, Request, RequestResponse) and at
// which stages an audit.k8s.io/v1 Event is written, and the events go to a
// JSON-lines log (rotated) and/or a batching webhook.
//
// One thing goes beyond kube-apiserver: the objects of sensitive resources
// (Secrets, a ServiceAccount token's TokenRequest, TokenReviews) are never
// written, whatever the level: requests for them are audited at Metadata
// at most (see sensitive).
package audit

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/meridian-cp/meridian/lib/identity"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"sigs.k8s.io/yaml"
)

// Attributes describe a request to the policy, as kube-apiserver's
// authorizer attributes do.
type Attributes struct {
	// User is the authenticated user (before impersonation, as
	// kube-apiserver evaluates its policy); empty when unauthenticated.
	User identity.User
	// Verb is the Kubernetes verb (get, list, watch, create, update,
	// patch, delete, deletecollection) of a resource request, the lower
	// case HTTP method of another.
	Verb string
	// ResourceRequest is set for requests on resources; Path is the URL
	// path of the others.
	ResourceRequest bool
	Path            string
	// What a resource request addresses.
	APIGroup, APIVersion, Resource, Subresource, Namespace, Name string
}

// stages is a set of stages, one bit each.
type stages uint8

const (
	stageRequestReceived stages = 1 << iota
	stageResponseStarted
	stageResponseComplete
	stagePanic
)

func stageBit(s auditv1.Stage) (stages, bool) {
	switch s {
	case auditv1.StageRequestReceived:
		return stageRequestReceived, true
	case auditv1.StageResponseStarted:
		return stageResponseStarted, true
	case auditv1.StageResponseComplete:
		return stageResponseComplete, true
	case auditv1.StagePanic:
		return stagePanic, true
	}
	return 0, false
}

// rank orders the levels; -1 for an unknown one.
func rank(l auditv1.Level) int {
	switch l {
	case auditv1.LevelNone:
		return 0
	case auditv1.LevelMetadata:
		return 1
	case auditv1.LevelRequest:
		return 2
	case auditv1.LevelRequestResponse:
		return 3
	}
	return -1
}

// Decision is what the policy says of one request.
type Decision struct {
	Level             auditv1.Level
	omit              stages
	OmitManagedFields bool
}

// Omits reports whether events of stage s are left out.
func (d Decision) Omits(s auditv1.Stage) bool {
	b, _ := stageBit(s)
	return d.omit&b != 0
}

// Policy is a loaded audit.k8s.io/v1 Policy, ready to evaluate. It is
// immutable and safe for concurrent use.
type Policy struct {
	rules []rule
}

// rule is a PolicyRule with its stages as a set.
type rule struct {
	auditv1.PolicyRule
	omit              stages
	omitManagedFields bool
}

// LoadPolicy reads and strictly decodes an audit.k8s.io/v1 Policy file
// (YAML or JSON): unknown fields, another apiVersion or kind, unknown
// levels or stages, and a policy without rules are errors, as
// kube-apiserver's --audit-policy-file loading.
func LoadPolicy(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("audit: policy: %w", err)
	}
	p, err := ParsePolicy(data)
	if err != nil {
		return nil, fmt.Errorf("audit: policy %s: %w", path, err)
	}
	return p, nil
}

// ParsePolicy decodes and compiles a Policy document; see LoadPolicy.
func ParsePolicy(data []byte) (*Policy, error) {
	var p auditv1.Policy
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	if p.APIVersion != auditv1.SchemeGroupVersion.String() || p.Kind != "Policy" {
		return nil, fmt.Errorf("apiVersion %q, kind %q: want %s, Policy", p.APIVersion, p.Kind, auditv1.SchemeGroupVersion)
	}
	if len(p.Rules) == 0 {
		return nil, errors.New("the policy has no rules")
	}
	var errs []error
	policyOmit, err := stageSet(p.OmitStages)
	if err != nil {
		errs = append(errs, fmt.Errorf("omitStages: %w", err))
	}
	out := &Policy{rules: make([]rule, len(p.Rules))}
	for i, r := range p.Rules {
		if err := validateRule(r); err != nil {
			errs = append(errs, fmt.Errorf("rules[%d]: %w", i, err))
		}
		omit, err := stageSet(r.OmitStages)
		if err != nil {
			errs = append(errs, fmt.Errorf("rules[%d].omitStages: %w", i, err))
		}
		// A rule's omitStages add to the policy's; its
		// omitManagedFields, when set, overrides the policy's.
		omf := p.OmitManagedFields
		if r.OmitManagedFields != nil {
			omf = *r.OmitManagedFields
		}
		out.rules[i] = rule{PolicyRule: r, omit: omit | policyOmit, omitManagedFields: omf}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func stageSet(list []auditv1.Stage) (stages, error) {
	var s stages
	for _, st := range list {
		b, ok := stageBit(st)
		if !ok {
			return 0, fmt.Errorf("unknown stage %q", st)
		}
		s |= b
	}
	return s, nil
}

// validateRule checks a rule as kube-apiserver's validation does.
func validateRule(r auditv1.PolicyRule) error {
	var errs []error
	if rank(r.Level) < 0 {
		errs = append(errs, fmt.Errorf("level %q is not None, Metadata, Request or RequestResponse", r.Level))
	}
	if len(r.NonResourceURLs) > 0 && (len(r.Resources) > 0 || len(r.Namespaces) > 0) {
		errs = append(errs, errors.New("rules cannot apply to both regular resources and non-resource URLs"))
	}
	for _, u := range r.NonResourceURLs {
		if u != "*" && !strings.HasPrefix(u, "/") {
			errs = append(errs, fmt.Errorf("nonResourceURLs: %q does not start with /", u))
		}
		if i := strings.Index(u, "*"); i >= 0 && i != len(u)-1 {
			errs = append(errs, fmt.Errorf("nonResourceURLs: %q has a * before its end", u))
		}
	}
	for i, gr := range r.Resources {
		for _, res := range gr.Resources {
			if res == "" || strings.Count(res, "/") > 1 {
				errs = append(errs, fmt.Errorf("resources[%d]: %q is neither resource, resource/subresource, */subresource nor resource/*", i, res))
			}
		}
	}
	return errors.Join(errs...)
}

// Evaluate returns the decision of the first rule that matches a; with
// none, the level is None. It allocates nothing.
func (p *Policy) Evaluate(a *Attributes) Decision {
	for i := range p.rules {
		r := &p.rules[i]
		if r.matches(a) {
			return Decision{Level: r.Level, omit: r.omit, OmitManagedFields: r.omitManagedFields}
		}
	}
	return Decision{Level: auditv1.LevelNone}
}

// matches is kube-apiserver's rule matching (policy.ruleMatches): every
// field the rule sets must match; resources and namespaces apply to
// resource requests only, nonResourceURLs to the others.
func (r *rule) matches(a *Attributes) bool {
	if len(r.Users) > 0 && (a.User.Name == "" || !slices.Contains(r.Users, a.User.Name)) {
		return false
	}
	if len(r.UserGroups) > 0 && !slices.ContainsFunc(a.User.Groups, func(g string) bool { return slices.Contains(r.UserGroups, g) }) {
		return false
	}
	if len(r.Verbs) > 0 && !slices.Contains(r.Verbs, a.Verb) {
		return false
	}
	if len(r.Namespaces) > 0 || len(r.Resources) > 0 {
		return r.matchesResource(a)
	}
	if len(r.NonResourceURLs) > 0 {
		return r.matchesNonResource(a)
	}
	return true
}

func (r *rule) matchesNonResource(a *Attributes) bool {
	if a.ResourceRequest {
		return false
	}
	for _, spec := range r.NonResourceURLs {
		if spec == "*" || spec == a.Path {
			return true
		}
		if prefix, ok := strings.CutSuffix(spec, "*"); ok && strings.HasPrefix(a.Path, prefix) {
			return true
		}
	}
	return false
}

// matchesResource matches namespaces ("" matches cluster-scoped requests)
// and group resources: "resource", "resource/subresource", "*" (any
// resource or subresource), "*/subresource" and "resource/*", each
// restricted to resourceNames when they are given.
func (r *rule) matchesResource(a *Attributes) bool {
	if !a.ResourceRequest {
		return false
	}
	if len(r.Namespaces) > 0 && !slices.Contains(r.Namespaces, a.Namespace) {
		return false
	}
	if len(r.Resources) == 0 {
		return true
	}
	for _, gr := range r.Resources {
		if gr.Group != a.APIGroup {
			continue
		}
		if len(gr.Resources) == 0 {
			return true
		}
		if len(gr.ResourceNames) > 0 && !slices.Contains(gr.ResourceNames, a.Name) {
			continue
		}
		for _, res := range gr.Resources {
			if resourceMatches(res, a.Resource, a.Subresource) {
				return true
			}
		}
	}
	return false
}

func resourceMatches(spec, resource, subresource string) bool {
	if spec == "*" {
		return true
	}
	name, sub, hasSub := strings.Cut(spec, "/")
	switch {
	case !hasSub:
		return subresource == "" && name == resource
	case name == "*":
		return subresource != "" && sub == subresource
	case sub == "*":
		return name == resource
	}
	return name == resource && sub == subresource
}

// sensitive reports whether the objects of a request may hold
// credentials, and so are never written to an audit event: Secrets, a
// TokenRequest (its response is a token) and TokenReviews (their
// request is one).
func sensitive(a *Attributes) bool {
	if !a.ResourceRequest {
		return false
	}
	switch {
	case a.APIGroup == "" && a.Resource == "secrets":
		return true
	case a.APIGroup == "" && a.Resource == "serviceaccounts" && a.Subresource == "token":
		return true
	case a.APIGroup == "authentication.k8s.io" && a.Resource == "tokenreviews":
		return true
	}
	return false
}
