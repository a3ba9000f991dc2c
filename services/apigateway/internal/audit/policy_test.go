package audit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meridian-cp/meridian/lib/identity"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

func mustPolicy(t testing.TB, doc string) *Policy {
	t.Helper()
	p, err := ParsePolicy([]byte(doc))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	return p
}

func resourceAttrs(user string, groups []string, verb, group, resource, sub, ns, name string) *Attributes {
	return &Attributes{User: identity.User{Name: user, Groups: groups}, Verb: verb, ResourceRequest: true,
		APIGroup: group, APIVersion: "v1", Resource: resource, Subresource: sub, Namespace: ns, Name: name}
}

func nonResource(user, verb, path string) *Attributes {
	return &Attributes{User: identity.User{Name: user}, Verb: verb, Path: path}
}

// TestPolicyRuleFields checks each rule field alone, matching and not, as
// kube-apiserver's policy checker decides.
func TestPolicyRuleFields(t *testing.T) {
	cases := []struct {
		name  string
		rule  string
		attrs *Attributes
		match bool
	}{
		{"users", `users: ["alice"]`, resourceAttrs("alice", nil, "get", "", "pods", "", "ns", "p"), true},
		{"users, another", `users: ["alice"]`, resourceAttrs("bob", nil, "get", "", "pods", "", "ns", "p"), false},
		{"users, unauthenticated", `users: ["alice"]`, resourceAttrs("", nil, "get", "", "pods", "", "ns", "p"), false},
		{"userGroups", `userGroups: ["dev", "ops"]`, resourceAttrs("bob", []string{"x", "ops"}, "get", "", "pods", "", "ns", "p"), true},
		{"userGroups, none", `userGroups: ["dev"]`, resourceAttrs("bob", []string{"ops"}, "get", "", "pods", "", "ns", "p"), false},
		{"verbs", `verbs: ["create", "delete"]`, resourceAttrs("a", nil, "delete", "", "pods", "", "ns", "p"), true},
		{"verbs, another", `verbs: ["create"]`, resourceAttrs("a", nil, "get", "", "pods", "", "ns", "p"), false},
		{"verbs, non-resource", `verbs: ["get"]`, nonResource("a", "get", "/healthz"), true},
		{"namespaces", `namespaces: ["kube-system"]`, resourceAttrs("a", nil, "get", "", "pods", "", "kube-system", "p"), true},
		{"namespaces, another", `namespaces: ["kube-system"]`, resourceAttrs("a", nil, "get", "", "pods", "", "default", "p"), false},
		{"namespaces, cluster scope", `namespaces: [""]`, resourceAttrs("a", nil, "get", "", "nodes", "", "", "n"), true},
		{"namespaces, non-resource", `namespaces: ["default"]`, nonResource("a", "get", "/version"), false},
		{"group", `resources: [{group: "apps"}]`, resourceAttrs("a", nil, "get", "apps", "deployments", "", "ns", "d"), true},
		{"group, another", `resources: [{group: "apps"}]`, resourceAttrs("a", nil, "get", "", "pods", "", "ns", "p"), false},
		{"resource", `resources: [{resources: ["pods"]}]`, resourceAttrs("a", nil, "get", "", "pods", "", "ns", "p"), true},
		{"resource, not its subresource", `resources: [{resources: ["pods"]}]`, resourceAttrs("a", nil, "get", "", "pods", "log", "ns", "p"), false},
		{"resource/subresource", `resources: [{resources: ["pods/log"]}]`, resourceAttrs("a", nil, "get", "", "pods", "log", "ns", "p"), true},
		{"resource/subresource, the resource", `resources: [{resources: ["pods/log"]}]`, resourceAttrs("a", nil, "get", "", "pods", "", "ns", "p"), false},
		{"*/subresource", `resources: [{resources: ["*/status"]}]`, resourceAttrs("a", nil, "update", "", "pods", "status", "ns", "p"), true},
		{"*/subresource, a resource", `resources: [{resources: ["*/status"]}]`, resourceAttrs("a", nil, "update", "", "pods", "", "ns", "p"), false},
		{"resource/*", `resources: [{resources: ["pods/*"]}]`, resourceAttrs("a", nil, "get", "", "pods", "exec", "ns", "p"), true},
		{"resource/*, the resource", `resources: [{resources: ["pods/*"]}]`, resourceAttrs("a", nil, "get", "", "pods", "", "ns", "p"), true},
		{"*", `resources: [{resources: ["*"]}]`, resourceAttrs("a", nil, "get", "", "secrets", "", "ns", "s"), true},
		{"*, another group", `resources: [{resources: ["*"]}]`, resourceAttrs("a", nil, "get", "apps", "deployments", "", "ns", "d"), false},
		{"resourceNames", `resources: [{resources: ["configmaps"], resourceNames: ["a", "b"]}]`, resourceAttrs("a", nil, "get", "", "configmaps", "", "ns", "b"), true},
		{"resourceNames, another", `resources: [{resources: ["configmaps"], resourceNames: ["a"]}]`, resourceAttrs("a", nil, "get", "", "configmaps", "", "ns", "c"), false},
		{"resources, non-resource", `resources: [{resources: ["*"]}]`, nonResource("a", "get", "/api"), false},
		{"nonResourceURLs", `nonResourceURLs: ["/healthz"]`, nonResource("a", "get", "/healthz"), true},
		{"nonResourceURLs, prefix", `nonResourceURLs: ["/healthz*"]`, nonResource("a", "get", "/healthz/etcd"), true},
		{"nonResourceURLs, another", `nonResourceURLs: ["/healthz*"]`, nonResource("a", "get", "/version"), false},
		{"nonResourceURLs, *", `nonResourceURLs: ["*"]`, nonResource("a", "get", "/openapi/v2"), true},
		{"nonResourceURLs, resource", `nonResourceURLs: ["*"]`, resourceAttrs("a", nil, "get", "", "pods", "", "ns", "p"), false},
		{"every field", `{users: ["alice"], userGroups: ["dev"], verbs: ["list"], namespaces: ["team"], resources: [{group: "apps", resources: ["deployments"]}]}`,
			resourceAttrs("alice", []string{"dev"}, "list", "apps", "deployments", "", "team", ""), true},
		{"every field, one wrong", `{users: ["alice"], userGroups: ["dev"], verbs: ["list"], namespaces: ["team"], resources: [{group: "apps", resources: ["deployments"]}]}`,
			resourceAttrs("alice", []string{"dev"}, "list", "apps", "deployments", "", "other", ""), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rule := strings.TrimPrefix(strings.TrimSuffix(c.rule, "}"), "{")
			p := mustPolicy(t, "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- {level: Request, "+rule+"}\n")
			got := p.Evaluate(c.attrs).Level
			want := auditv1.LevelNone
			if c.match {
				want = auditv1.LevelRequest
			}
			if got != want {
				t.Errorf("rule %s on %+v: %s, want %s", c.rule, c.attrs, got, want)
			}
		})
	}
}

// TestPolicyFirstMatchWins: rules are tried in order; the first that
// matches decides, and no match is None.
func TestPolicyFirstMatchWins(t *testing.T) {
	p := mustPolicy(t, `apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: None
  users: ["system:kube-proxy"]
- level: RequestResponse
  resources: [{resources: ["configmaps"]}]
- level: Metadata
  resources: [{resources: ["configmaps", "pods"]}]
- level: Request
  verbs: ["create"]
`)
	for _, c := range []struct {
		attrs *Attributes
		want  auditv1.Level
	}{
		{resourceAttrs("system:kube-proxy", nil, "get", "", "configmaps", "", "ns", "c"), auditv1.LevelNone},
		{resourceAttrs("alice", nil, "get", "", "configmaps", "", "ns", "c"), auditv1.LevelRequestResponse},
		{resourceAttrs("alice", nil, "create", "", "pods", "", "ns", "p"), auditv1.LevelMetadata},
		{resourceAttrs("alice", nil, "create", "apps", "deployments", "", "ns", "d"), auditv1.LevelRequest},
		{resourceAttrs("alice", nil, "get", "apps", "deployments", "", "ns", "d"), auditv1.LevelNone},
	} {
		if got := p.Evaluate(c.attrs).Level; got != c.want {
			t.Errorf("%+v: %s, want %s", c.attrs, got, c.want)
		}
	}
}

// TestPolicyOmitStages: the policy's omitStages apply to every rule, a
// rule's add to them; omitManagedFields of a rule overrides the policy's.
func TestPolicyOmitStages(t *testing.T) {
	p := mustPolicy(t, `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
omitManagedFields: true
rules:
- level: Metadata
  verbs: ["watch"]
  omitStages: ["ResponseStarted"]
  omitManagedFields: false
- level: Metadata
`)
	watch := p.Evaluate(resourceAttrs("a", nil, "watch", "", "pods", "", "", ""))
	get := p.Evaluate(resourceAttrs("a", nil, "get", "", "pods", "", "ns", "p"))
	for _, c := range []struct {
		d     Decision
		stage auditv1.Stage
		want  bool
	}{
		{watch, auditv1.StageRequestReceived, true},
		{watch, auditv1.StageResponseStarted, true},
		{watch, auditv1.StageResponseComplete, false},
		{watch, auditv1.StagePanic, false},
		{get, auditv1.StageRequestReceived, true},
		{get, auditv1.StageResponseStarted, false},
		{get, auditv1.StageResponseComplete, false},
	} {
		if got := c.d.Omits(c.stage); got != c.want {
			t.Errorf("%+v omits %s: %v, want %v", c.d, c.stage, got, c.want)
		}
	}
	if watch.OmitManagedFields || !get.OmitManagedFields {
		t.Errorf("omitManagedFields: watch %v (rule false), get %v (policy true)", watch.OmitManagedFields, get.OmitManagedFields)
	}
}

// TestParsePolicyRefuses: strict decoding and validation, with the
// problem named.
func TestParsePolicyRefuses(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  user: [alice]\n", `unknown field "user"`},
		{"apiVersion: audit.k8s.io/v1\nkind: Policy\nrulez: []\n", `unknown field "rulez"`},
		{"apiVersion: audit.k8s.io/v1beta1\nkind: Policy\nrules:\n- level: Metadata\n", "want audit.k8s.io/v1, Policy"},
		{"apiVersion: audit.k8s.io/v1\nkind: PolicyList\nrules:\n- level: Metadata\n", "want audit.k8s.io/v1, Policy"},
		{"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: []\n", "no rules"},
		{"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Everything\n", `level "Everything"`},
		{"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  omitStages: [Done]\n", `unknown stage "Done"`},
		{"apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [Done]\nrules:\n- level: Metadata\n", `unknown stage "Done"`},
		{"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  nonResourceURLs: [/x]\n  namespaces: [a]\n", "both regular resources and non-resource URLs"},
		{"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  nonResourceURLs: [healthz]\n", "does not start with /"},
		{"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n  resources: [{resources: [a/b/c]}]\n", `"a/b/c"`},
	} {
		_, err := ParsePolicy([]byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("policy %q: %v, want an error with %q", c.doc, err, c.want)
		}
	}
	if _, err := LoadPolicy(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("a missing policy file: %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}

// TestEvaluateAllocatesNothing: evaluating the policy costs no
// allocation.
func TestEvaluateAllocatesNothing(t *testing.T) {
	p := mustPolicy(t, `apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: None
  users: ["system:kube-proxy"]
  verbs: ["watch"]
- level: RequestResponse
  resources: [{group: "", resources: ["configmaps", "pods/log"]}]
- level: Metadata
`)
	a := resourceAttrs("alice", []string{"dev"}, "get", "", "pods", "log", "ns", "p")
	if n := testing.AllocsPerRun(100, func() { p.Evaluate(a) }); n != 0 {
		t.Errorf("Evaluate allocates %v times", n)
	}
}
