package apf

import (
	"slices"
	"strings"
	"time"

	"github.com/meridian-cp/meridian/lib/kube/apfbootstrap"
)

// Well-known groups, as Kubernetes' authenticators set them.
const (
	GroupMasters         = "system:masters"
	GroupAuthenticated   = "system:authenticated"
	GroupUnauthenticated = "system:unauthenticated"
	UserAnonymous        = "system:anonymous"
)

// Names of the bootstrap configuration objects (apfbootstrap).
const (
	LevelExempt        = apfbootstrap.Exempt
	LevelCatchAll      = apfbootstrap.CatchAll
	LevelGlobalDefault = apfbootstrap.GlobalDefault

	SchemaExempt        = apfbootstrap.Exempt
	SchemaProbes        = apfbootstrap.Probes
	SchemaGlobalDefault = apfbootstrap.GlobalDefault
	SchemaCatchAll      = apfbootstrap.CatchAll
)

// Digest is what classification reads of a request (see the proto's
// RequestDigest).
type Digest struct {
	User              string
	Groups            []string
	Verb              string
	APIGroup          string
	Resource          string
	Subresource       string
	Namespace         string
	Name              string
	Path              string
	IsResourceRequest bool
	// Width is the number of seats the request occupies; 0 means 1.
	Width uint32
	// FinalSeats and AdditionalLatency are the cost of the watch
	// notifications a write causes (kube-apiserver's mutating work
	// estimate): the request occupies max(Width, FinalSeats) seats while
	// it runs, and keeps them for AdditionalLatency after its Release
	// (linger.go).
	FinalSeats        uint32
	AdditionalLatency time.Duration
}

// effectiveGroups returns d's groups plus system:authenticated or
// system:unauthenticated when the gateway did not send them, so that a
// request is classified the same whether or not its authenticator added
// them: a named user other than system:anonymous is authenticated.
func (d *Digest) effectiveGroups() []string {
	if slices.Contains(d.Groups, GroupAuthenticated) || slices.Contains(d.Groups, GroupUnauthenticated) {
		return d.Groups
	}
	g := slices.Clip(d.Groups)
	if d.User == "" || d.User == UserAnonymous {
		return append(g, GroupUnauthenticated)
	}
	return append(g, GroupAuthenticated)
}

// Subjects selects requesters, like a FlowSchema's subjects: a request
// matches when its user is in Users, it has one of Groups, or its user is
// one of ServiceAccounts. "*" in Users or Groups matches everyone.
type Subjects struct {
	Users           []string
	Groups          []string
	ServiceAccounts []ServiceAccount
}

// ServiceAccount names the service account Name of Namespace; Name "*"
// is every service account of the namespace.
type ServiceAccount struct {
	Namespace, Name string
}

// serviceAccountPrefix starts a service account's user name:
// system:serviceaccount:<namespace>:<name>.
const serviceAccountPrefix = "system:serviceaccount:"

// user returns the user name of sa, or its namespace's prefix when Name
// is "*".
func (sa ServiceAccount) user() string {
	if sa.Name == "*" {
		return serviceAccountPrefix + sa.Namespace + ":"
	}
	return serviceAccountPrefix + sa.Namespace + ":" + sa.Name
}

// matches reports whether user is sa's user name (or, for Name "*", that
// of a service account of its namespace), compared piece by piece rather
// than built, since every classification asks.
func (sa ServiceAccount) matches(user string) bool {
	rest, ok := strings.CutPrefix(user, serviceAccountPrefix)
	if !ok {
		return false
	}
	if rest, ok = strings.CutPrefix(rest, sa.Namespace); !ok {
		return false
	}
	if rest, ok = strings.CutPrefix(rest, ":"); !ok {
		return false
	}
	if sa.Name == "*" {
		return rest != "" && !strings.Contains(rest, ":")
	}
	return rest == sa.Name
}

func (s Subjects) matches(d *Digest) bool {
	if slices.Contains(s.Users, "*") || (d.User != "" && slices.Contains(s.Users, d.User)) {
		return true
	}
	for _, sa := range s.ServiceAccounts {
		if sa.matches(d.User) {
			return true
		}
	}
	if slices.Contains(s.Groups, "*") {
		return true
	}
	for _, g := range d.effectiveGroups() {
		if slices.Contains(s.Groups, g) {
			return true
		}
	}
	return false
}

// ResourceRule matches resource requests, like a FlowSchema's
// resourceRules. "*" matches anything in each list. Resources may name a
// subresource as "pods/status". Namespaces match namespaced requests;
// ClusterScope matches requests without a namespace.
type ResourceRule struct {
	Verbs        []string
	APIGroups    []string
	Resources    []string
	Namespaces   []string
	ClusterScope bool
}

func (r ResourceRule) matches(d *Digest) bool {
	if !d.IsResourceRequest || !matchList(r.Verbs, d.Verb) || !matchList(r.APIGroups, d.APIGroup) {
		return false
	}
	res := d.Resource
	if d.Subresource != "" {
		res += "/" + d.Subresource
	}
	if !matchList(r.Resources, res) {
		return false
	}
	if d.Namespace == "" {
		return r.ClusterScope
	}
	return matchList(r.Namespaces, d.Namespace)
}

// NonResourceRule matches non-resource requests, like a FlowSchema's
// nonResourceRules. A URL ending in "/*" matches that prefix.
type NonResourceRule struct {
	Verbs []string
	URLs  []string
}

func (r NonResourceRule) matches(d *Digest) bool {
	if d.IsResourceRequest || !matchList(r.Verbs, d.Verb) {
		return false
	}
	for _, u := range r.URLs {
		switch {
		case u == "*" || u == d.Path:
			return true
		case strings.HasSuffix(u, "/*") && strings.HasPrefix(d.Path, strings.TrimSuffix(u, "*")):
			return true
		}
	}
	return false
}

func matchList(list []string, v string) bool {
	return slices.Contains(list, "*") || slices.Contains(list, v)
}

// Distinguisher splits a flow schema's requests into flows.
type Distinguisher int

const (
	// DistinguishNone puts all of a schema's requests in one flow.
	DistinguishNone Distinguisher = iota
	// DistinguishByUser makes one flow per user.
	DistinguishByUser
	// DistinguishByNamespace makes one flow per namespace.
	DistinguishByNamespace
)

// Rule is one policy rule of a FlowSchema: a request matches when its
// subjects match and one of its resource or non-resource rules does.
type Rule struct {
	Subjects     Subjects
	Resources    []ResourceRule
	NonResources []NonResourceRule
}

func (r Rule) matches(d *Digest) bool {
	if !r.Subjects.matches(d) {
		return false
	}
	for _, rr := range r.Resources {
		if rr.matches(d) {
			return true
		}
	}
	for _, nr := range r.NonResources {
		if nr.matches(d) {
			return true
		}
	}
	return false
}

// FlowSchema classifies requests into a priority level.
type FlowSchema struct {
	Name string
	// UID is the object's metadata.uid, sent to clients in
	// X-Kubernetes-PF-FlowSchema-UID.
	UID string
	// MatchingPrecedence orders schemas: the lowest matching one wins, ties
	// broken by name.
	MatchingPrecedence int
	PriorityLevel      string
	Distinguisher      Distinguisher
	Rules              []Rule
}

func (fs *FlowSchema) matches(d *Digest) bool {
	for _, r := range fs.Rules {
		if r.matches(d) {
			return true
		}
	}
	return false
}

// flowDistinguisher returns the flow of d within fs.
func (fs *FlowSchema) flowDistinguisher(d *Digest) string {
	switch fs.Distinguisher {
	case DistinguishByUser:
		return d.User
	case DistinguishByNamespace:
		return d.Namespace
	}
	return ""
}

// everything matches every request of the subjects.
func everything(s Subjects) Rule {
	return Rule{
		Subjects: s,
		Resources: []ResourceRule{{
			Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"},
			Namespaces: []string{"*"}, ClusterScope: true,
		}},
		NonResources: []NonResourceRule{{Verbs: []string{"*"}, URLs: []string{"*"}}},
	}
}
