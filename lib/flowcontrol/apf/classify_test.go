package apf

import (
	"errors"
	"testing"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meridian-cp/meridian/lib/kube/apfbootstrap"
)

// TestBootstrapClassification: kube-apiserver's mandatory and suggested
// configuration classifies as upstream's does.
func TestBootstrapClassification(t *testing.T) {
	c := newController(t, Config{})
	res := func(user string, groups []string, verb, group, resource, ns string) Digest {
		return Digest{User: user, Groups: groups, Verb: verb, APIGroup: group, Resource: resource, Namespace: ns, IsResourceRequest: true}
	}
	auth := []string{GroupAuthenticated}
	sa := func(ns, name string) string { return "system:serviceaccount:" + ns + ":" + name }
	saGroups := func(ns string) []string {
		return []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, GroupAuthenticated}
	}
	for _, tc := range []struct {
		name          string
		d             Digest
		schema, level string
		flowBy        string // the distinguisher expected
	}{
		{"masters", res("admin", []string{GroupMasters}, "delete", "", "secrets", "x"), "exempt", "exempt", ""},
		{"probe", Digest{User: UserAnonymous, Groups: []string{GroupUnauthenticated}, Verb: "get", Path: "/readyz"}, "probes", "exempt", ""},
		{"probe by post", Digest{User: "bob", Verb: "post", Path: "/healthz"}, "global-default", "global-default", "bob"},
		{"leader election lease, controller manager", res("system:kube-controller-manager", auth, "update", "coordination.k8s.io", "leases", "kube-system"),
			"system-leader-election", "leader-election", "system:kube-controller-manager"},
		{"leader election, kube-system service account", res(sa("kube-system", "ctrl"), saGroups("kube-system"), "get", "coordination.k8s.io", "leases", "kube-system"),
			"system-leader-election", "leader-election", sa("kube-system", "ctrl")},
		{"lease list is not leader election", res("system:kube-scheduler", auth, "list", "coordination.k8s.io", "leases", "kube-system"),
			"kube-scheduler", "workload-high", "kube-system"},
		{"node status", Digest{User: "system:node:n1", Groups: []string{"system:nodes", GroupAuthenticated}, Verb: "patch", Resource: "nodes", Subresource: "status", Name: "n1", IsResourceRequest: true},
			"system-node-high", "node-high", "system:node:n1"},
		{"node reads pods", res("system:node:n1", []string{"system:nodes", GroupAuthenticated}, "list", "", "pods", "a"), "system-nodes", "system", "system:node:n1"},
		{"controller manager", res("system:kube-controller-manager", auth, "list", "apps", "deployments", "team"), "kube-controller-manager", "workload-high", "team"},
		{"kube-system service account", res(sa("kube-system", "x"), saGroups("kube-system"), "list", "", "configmaps", "a"), "kube-system-service-accounts", "workload-high", "a"},
		{"other service account", res(sa("team", "x"), saGroups("team"), "list", "", "configmaps", "team"), "service-accounts", "workload-low", sa("team", "x")},
		{"user", res("alice", auth, "create", "", "configmaps", "a"), "global-default", "global-default", "alice"},
		{"anonymous", Digest{User: UserAnonymous, Verb: "get", Path: "/version"}, "global-default", "global-default", UserAnonymous},
		{"kube-system lookalike user", res("system:serviceaccount:kube-system:a:b", auth, "get", "", "pods", "a"), "global-default", "global-default", "system:serviceaccount:kube-system:a:b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := c.classify(&tc.d)
			if s.Name != tc.schema || s.level.cfg.Name != tc.level {
				t.Fatalf("classified %s/%s, want %s/%s", s.Name, s.level.cfg.Name, tc.schema, tc.level)
			}
			if got := s.flowDistinguisher(&tc.d); got != tc.flowBy {
				t.Errorf("flow %q, want %q", got, tc.flowBy)
			}
		})
	}
}

func userSubject(name string) *flowcontrolv1.Subject {
	return &flowcontrolv1.Subject{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: name}}
}

func flowSchema(name, level string, precedence int32, subjects ...flowcontrolv1.Subject) *flowcontrolv1.FlowSchema {
	return &flowcontrolv1.FlowSchema{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}, Spec: flowcontrolv1.FlowSchemaSpec{
		PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: level},
		MatchingPrecedence:         precedence,
		Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
			Subjects:         subjects,
			ResourceRules:    []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"}, Namespaces: []string{"*"}, ClusterScope: true}},
			NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
		}},
	}}
}

func limited(name string, shares int32, queuing *flowcontrolv1.QueuingConfiguration) *flowcontrolv1.PriorityLevelConfiguration {
	lr := flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject}
	if queuing != nil {
		lr = flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeQueue, Queuing: queuing}
	}
	zero := int32(0)
	return &flowcontrolv1.PriorityLevelConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}, Spec: flowcontrolv1.PriorityLevelConfigurationSpec{
		Type:    flowcontrolv1.PriorityLevelEnablementLimited,
		Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{NominalConcurrencyShares: &shares, LendablePercent: &zero, LimitResponse: lr},
	}}
}

// TestConfigure: stored objects replace the bootstrap configuration: the
// lowest matchingPrecedence wins and ties go to the name first in order;
// a Dangling schema is skipped; the mandatory objects are supplied when
// missing; seats are split by nominal shares; UIDs are the objects'.
func TestConfigure(t *testing.T) {
	c := newController(t, Config{ServerConcurrencyLimit: 100})
	levels := []*flowcontrolv1.PriorityLevelConfiguration{limited("one", 1, nil), limited("many", 94, &flowcontrolv1.QueuingConfiguration{Queues: 8, HandSize: 2, QueueLengthLimit: 5})}
	schemas := []*flowcontrolv1.FlowSchema{
		flowSchema("b-tie", "many", 500, *userSubject("alice")),
		flowSchema("a-tie", "one", 500, *userSubject("alice")),
		flowSchema("dangling", "missing", 10, *userSubject("alice")),
		flowSchema("bob", "many", 600, *userSubject("bob"), *userSubject("*")),
	}
	_, before := c.Exemptions()
	if err := c.Configure(schemas, levels); err != nil {
		t.Fatal(err)
	}
	select {
	case <-before:
	default:
		t.Fatal("Exemptions' channel not closed by a new configuration")
	}
	alice := Digest{User: "alice", Groups: []string{GroupAuthenticated}, Verb: "get", Path: "/x"}
	if s := c.classify(&alice); s.Name != "a-tie" || s.uid != "uid-a-tie" || s.level.uid != "uid-one" {
		t.Fatalf("alice: %s (%s) at %s", s.Name, s.uid, s.level.uid)
	}
	carol := Digest{User: "carol", Verb: "get", Path: "/x"}
	if s := c.classify(&carol); s.Name != "bob" {
		t.Fatalf("carol: %s, want bob (user *)", s.Name)
	}
	root := Digest{User: "root", Groups: []string{GroupMasters}, Verb: "get", Path: "/x"}
	if s := c.classify(&root); s.Name != apfbootstrap.Exempt || s.uid != ObjectUID("flowschemas", apfbootstrap.Exempt) {
		t.Fatalf("root: %s, want the mandatory exempt supplied", s.Name)
	}
	// Shares: one 1, many 94, catch-all 5 (supplied), exempt 0: 100 in
	// all, so 1, 94 and 5 seats.
	for name, want := range map[string]int{"one": 1, "many": 94, apfbootstrap.CatchAll: 5} {
		if got := c.cur.Load().levels[name].cfg.Seats; got != want {
			t.Errorf("%s: %d seats, want %d", name, got, want)
		}
	}
	if _, ok := c.LevelStats("global-default"); ok {
		t.Error("global-default still served")
	}

	// Level "one" rejects: one request holds its seat, the next is
	// rejected at once.
	g, err := c.Acquire(t.Context(), "gw", alice)
	if err != nil {
		t.Fatal(err)
	}
	var rej *RejectedError
	if _, err := c.Acquire(t.Context(), "gw", alice); !errors.As(err, &rej) || rej.Reason != ReasonConcurrencyLimit || rej.PriorityLevel != "one" {
		t.Fatalf("second request: %v, want a concurrency-limit rejection by one", err)
	}
	// One turns into a queuing level of 2 seats: the held grant keeps its
	// seat, and the level has room for one more.
	levels[0] = limited("one", 2, &flowcontrolv1.QueuingConfiguration{Queues: 4, HandSize: 1, QueueLengthLimit: 3})
	if err := c.Configure(schemas, levels); err != nil {
		t.Fatal(err)
	}
	if s := stats(t, c, "one"); s.SeatsInUse != 1 {
		t.Fatalf("after reconfiguration: %+v", s)
	}
	if err := c.Release(t.Context(), g.ID); err != nil {
		t.Fatal(err)
	}
}

// TestReconfigureQueued: waiting requests are dealt again into a level's
// new queues, and rejected when it stops queuing; seats stay balanced.
func TestReconfigureQueued(t *testing.T) {
	c := newController(t, Config{ServerConcurrencyLimit: 100})
	schemas := []*flowcontrolv1.FlowSchema{flowSchema("all", "lvl", 500, *userSubject("*"))}
	queued := func(queues int32) []*flowcontrolv1.PriorityLevelConfiguration {
		return []*flowcontrolv1.PriorityLevelConfiguration{limited("lvl", 1, &flowcontrolv1.QueuingConfiguration{Queues: queues, HandSize: 1, QueueLengthLimit: 10})}
	}
	// 1 share of 1+5 (catch-all): 17 seats; take them all.
	if err := c.Configure(schemas, queued(4)); err != nil {
		t.Fatal(err)
	}
	var held []Grant
	for range c.cur.Load().levels["lvl"].cfg.Seats {
		g, err := c.Acquire(t.Context(), "gw", Digest{User: "u", Verb: "get", Path: "/"})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, g)
	}
	errs := make(chan error, 4)
	for i := range 4 {
		go func() {
			g, err := c.Acquire(t.Context(), "gw", Digest{User: string(rune('a' + i)), Verb: "get", Path: "/"})
			if err == nil {
				err = c.Release(t.Context(), g.ID)
			}
			errs <- err
		}()
	}
	waitFor(t, "four queued", func() bool { return stats(t, c, "lvl").Queued == 4 })
	if err := c.Configure(schemas, queued(16)); err != nil {
		t.Fatal(err)
	}
	if s := stats(t, c, "lvl"); s.Queued != 4 {
		t.Fatalf("after new queues: %+v", s)
	}
	reject := []*flowcontrolv1.PriorityLevelConfiguration{limited("lvl", 1, nil)}
	if err := c.Configure(schemas, reject); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		var rej *RejectedError
		if err := <-errs; !errors.As(err, &rej) || rej.Reason != ReasonConcurrencyLimit {
			t.Fatalf("queued request: %v, want rejected", err)
		}
	}
	for _, g := range held {
		if err := c.Release(t.Context(), g.ID); err != nil {
			t.Fatal(err)
		}
	}
	if s := stats(t, c, "lvl"); s.SeatsInUse != 0 || s.Queued != 0 {
		t.Fatalf("at the end: %+v", s)
	}
}

// TestHealthForStrangers: the spec's example FlowSchema exempts health
// checks of unauthenticated callers, whatever their verb, and nothing
// else; with probes left out, an authenticated caller's health check
// stays in global-default.
func TestHealthForStrangers(t *testing.T) {
	c := newController(t, Config{})
	strangers := &flowcontrolv1.FlowSchema{ObjectMeta: metav1.ObjectMeta{Name: "health-for-strangers"}, Spec: flowcontrolv1.FlowSchemaSpec{
		MatchingPrecedence:         1000,
		PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "exempt"},
		Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
			NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{NonResourceURLs: []string{"/healthz", "/livez", "/readyz"}, Verbs: []string{"*"}}},
			Subjects:         []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindGroup, Group: &flowcontrolv1.GroupSubject{Name: "system:unauthenticated"}}},
		}},
	}}
	schemas := []*flowcontrolv1.FlowSchema{strangers}
	for _, fs := range apfbootstrap.FlowSchemas() {
		if fs.Name != apfbootstrap.Probes {
			schemas = append(schemas, fs)
		}
	}
	if err := c.Configure(schemas, apfbootstrap.PriorityLevels()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		d      Digest
		schema string
	}{
		{Digest{User: UserAnonymous, Groups: []string{GroupUnauthenticated}, Verb: "get", Path: "/livez"}, "health-for-strangers"},
		{Digest{User: UserAnonymous, Groups: []string{GroupUnauthenticated}, Verb: "head", Path: "/readyz"}, "health-for-strangers"},
		{Digest{User: UserAnonymous, Groups: []string{GroupUnauthenticated}, Verb: "get", Path: "/version"}, "global-default"},
		{Digest{User: UserAnonymous, Groups: []string{GroupUnauthenticated}, Verb: "get", Path: "/healthz/etcd"}, "global-default"},
		{Digest{User: "kubelet", Groups: []string{GroupAuthenticated}, Verb: "get", Path: "/healthz"}, "global-default"},
	} {
		g, err := c.Acquire(t.Context(), "gw", tc.d)
		if err != nil {
			t.Fatal(err)
		}
		if g.FlowSchema != tc.schema || g.Exempt != (tc.schema == "health-for-strangers") {
			t.Errorf("%s %s by %s: %s (exempt %v), want %s", tc.d.Verb, tc.d.Path, tc.d.User, g.FlowSchema, g.Exempt, tc.schema)
		}
		if !g.Exempt {
			_ = c.Release(t.Context(), g.ID)
		}
	}
}

// TestClassifyNamesSchemaAndLevel: Classify answers what Acquire would,
// for an exempt and a limited level, with their UIDs, and takes no seat.
func TestClassifyNamesSchemaAndLevel(t *testing.T) {
	c := newController(t, Config{})
	probe := Digest{User: UserAnonymous, Groups: []string{GroupUnauthenticated}, Verb: "get", Path: "/livez"}
	got := c.Classify(&probe)
	want := Classification{FlowSchema: "probes", FlowSchemaUID: ObjectUID("flowschemas", "probes"),
		PriorityLevel: "exempt", PriorityLevelUID: ObjectUID("prioritylevelconfigurations", "exempt"), Exempt: true}
	if got != want {
		t.Errorf("probe: %+v, want %+v", got, want)
	}
	version := Digest{User: "bob", Groups: []string{GroupAuthenticated}, Verb: "get", Path: "/version"}
	got = c.Classify(&version)
	g, err := c.Acquire(t.Context(), "gw", version)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release(t.Context(), g.ID)
	if got.Exempt || got.FlowSchema != "global-default" || got.FlowSchemaUID != g.FlowSchemaUID || got.PriorityLevelUID != g.PriorityLevelUID {
		t.Errorf("/version: %+v, Acquire granted %+v", got, g)
	}
	if s, _ := c.LevelStats("global-default"); s.SeatsInUse != 1 {
		t.Errorf("global-default seats in use %d, want 1: Acquire's only", s.SeatsInUse)
	}
}
