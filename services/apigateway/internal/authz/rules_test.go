package authz

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestCompactRules: the uncovered single-verb rules of an escalation
// error are merged by group, resource and name, as kube-apiserver shows
// them.
func TestCompactRules(t *testing.T) {
	got := compactRules([]rbacv1.PolicyRule{
		rule(s("get"), s(""), s("configmaps")),
		rule(s("list"), s(""), s("configmaps")),
		{Verbs: s("get"), APIGroups: s(""), Resources: s("secrets"), ResourceNames: s("a")},
		{Verbs: s("get"), APIGroups: s(""), Resources: s("secrets"), ResourceNames: s("b")},
		urlRule(s("get"), s("/healthz")),
	})
	var descriptions []string
	for _, r := range got {
		descriptions = append(descriptions, compactString(r))
	}
	want := []string{
		`{NonResourceURLs:["/healthz"], Verbs:["get"]}`,
		`{APIGroups:[""], Resources:["configmaps"], Verbs:["get" "list"]}`,
		`{APIGroups:[""], Resources:["secrets"], ResourceNames:["a"], Verbs:["get"]}`,
		`{APIGroups:[""], Resources:["secrets"], ResourceNames:["b"], Verbs:["get"]}`,
	}
	if len(descriptions) != len(want) {
		t.Fatalf("compacted to %q, want %q", descriptions, want)
	}
	for i := range want {
		if descriptions[i] != want[i] {
			t.Errorf("rule %d: %s, want %s", i, descriptions[i], want[i])
		}
	}
}
