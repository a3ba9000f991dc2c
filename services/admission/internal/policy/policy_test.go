package policy_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
	"github.com/meridian-cp/meridian/services/admission/internal/policy"
)

type fixed struct {
	d      policy.Decision
	err    error
	ignore bool
	called *int
}

func (f fixed) Evaluate(context.Context, *admissionv1.AdmitRequest) (policy.Decision, error) {
	if f.called != nil {
		*f.called++
	}
	return f.d, f.err
}

func (f fixed) IgnoreFailure() bool { return f.ignore }

type list []policy.Policy

func (l list) Matching(*admissionv1.AdmitRequest) []policy.Policy { return l }

func (l list) Scope() (policy.Scope, <-chan struct{}) { return policy.Scope{Everything: true}, nil }

func TestPipeline(t *testing.T) {
	var after int
	tests := []struct {
		name string
		set  policy.Set
		want policy.Result
	}{
		{"empty admits", policy.Empty{}, policy.Result{Allowed: true}},
		{"nil set admits", nil, policy.Result{Allowed: true}},
		{
			"first denial wins, warnings accumulate",
			list{
				fixed{d: policy.Decision{Warnings: []string{"w1"}, AuditAnnotations: map[string]string{"a": "1"}}},
				fixed{d: policy.Decision{Warnings: []string{"w2"}, AuditAnnotations: map[string]string{"a": "2", "b": "2"},
					Denial: &policy.Denial{Code: 422, Message: "no"}}},
				fixed{d: policy.Decision{Denial: &policy.Denial{Message: "later"}}, called: &after},
			},
			policy.Result{
				Allowed:          false,
				Denial:           &policy.Denial{Code: 422, Reason: "Invalid", Message: "no"},
				Warnings:         []string{"w1", "w2"},
				AuditAnnotations: map[string]string{"a": "1", "b": "2"},
			},
		},
		{
			"failure denies",
			list{fixed{err: errors.New("p: boom")}},
			policy.Result{Denial: &policy.Denial{Code: 500, Reason: "InternalError", Message: "admission policy failed: p: boom"}},
		},
		{
			"ignored failure admits",
			list{fixed{err: errors.New("boom"), ignore: true}, fixed{d: policy.Decision{Warnings: []string{"w"}}}},
			policy.Result{Allowed: true, Warnings: []string{"w"}},
		},
		{
			"default denial",
			list{fixed{d: policy.Decision{Denial: &policy.Denial{}}}},
			policy.Result{Denial: &policy.Denial{Code: 403, Reason: "Forbidden", Message: "denied by admission policy"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := policy.Evaluator{Set: tc.set}.Admit(t.Context(), &admissionv1.AdmitRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v (denial %+v), want %+v (denial %+v)", got, got.Denial, tc.want, tc.want.Denial)
			}
		})
	}
	if after != 0 {
		t.Fatal("a policy after the denial was evaluated")
	}
}

func TestCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := policy.Evaluator{Set: list{fixed{}}}.Admit(ctx, &admissionv1.AdmitRequest{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}
