package policy_test

import (
	"context"
	"testing"

	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/internal/policy"
)

type namedPolicy struct {
	name     string
	mutating bool
}

func (n namedPolicy) Evaluate(context.Context, *admissionv1.AdmitRequest) (policy.Decision, error) {
	return policy.Decision{}, nil
}
func (n namedPolicy) Mutating() bool { return n.mutating }

type fixedSet struct {
	policies []policy.Policy
	scope    policy.Scope
	changed  chan struct{}
}

func (f *fixedSet) Matching(*admissionv1.AdmitRequest) []policy.Policy { return f.policies }
func (f *fixedSet) Scope() (policy.Scope, <-chan struct{})             { return f.scope, f.changed }

// Mutating policies of every set run before the others; scopes add up
// and a change of either set is a change of the union.
func TestUnion(t *testing.T) {
	a := &fixedSet{policies: []policy.Policy{namedPolicy{"a-mut", true}, namedPolicy{"a-val", false}},
		scope: policy.Scope{Rules: []policy.Rule{{Resources: []string{"pods"}}}}, changed: make(chan struct{})}
	b := &fixedSet{policies: []policy.Policy{namedPolicy{"b-mut", true}, namedPolicy{"b-val", false}},
		scope: policy.Scope{Rules: []policy.Rule{{Resources: []string{"configmaps"}}}}, changed: make(chan struct{})}
	u := policy.Union{a, b}
	var got []string
	for _, p := range u.Matching(&admissionv1.AdmitRequest{}) {
		got = append(got, p.(namedPolicy).name)
	}
	want := []string{"a-mut", "b-mut", "a-val", "b-val"}
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			t.Fatalf("order %v, want %v", got, want)
		}
	}
	sc, ch := u.Scope()
	if len(sc.Rules) != 2 {
		t.Fatalf("scope %+v", sc)
	}
	close(b.changed)
	<-ch // a change of b is a change of the union (a hang fails the test)
}
