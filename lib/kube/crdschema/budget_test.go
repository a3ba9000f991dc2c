package crdschema

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/cel/environment"

	"github.com/meridian-cp/meridian/lib/kube/celenv"
)

// grid is a Grid with n rows of m cells.
func grid(n, m int) *unstructured.Unstructured {
	rows := make([]any, n)
	for i := range rows {
		cells := make([]any, m)
		for j := range cells {
			cells[j] = int64(j)
		}
		rows[i] = map[string]any{"cells": cells}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Grid",
		"metadata": map[string]any{"name": "g", "namespace": "default"},
		"spec":     map[string]any{"rows": rows},
	}}
}

// TestRuntimeBudget: the rules of one request share one runtime budget;
// once they have spent it Admit stops with upstream's error. Spending the
// real budget (celenv.RuntimeBudget, about a second of evaluation) would
// make a slow unit test, so the test lowers this schema's budget to what
// three of the ten rows cost.
func TestRuntimeBudget(t *testing.T) {
	crd := loadCRD(t, "costly.yaml")
	if errs := ValidateDefinition(context.Background(), crd, nil); len(errs) > 0 {
		t.Fatalf("CRD rejected: %v", errs)
	}
	s := compile(t, "costly.yaml", "v1")
	if s.budget != celenv.RuntimeBudget {
		t.Fatalf("budget = %d, want celenv.RuntimeBudget", s.budget)
	}
	if _, errs := s.Admit(context.Background(), grid(10, 20), nil, ""); len(errs) > 0 {
		t.Fatalf("grid within the budget: %v", errs)
	}
	s.budget = 3 * rowCost(t, s)
	if _, errs := s.Admit(context.Background(), grid(3, 20), nil, ""); len(errs) > 0 {
		t.Fatalf("three rows: %v", errs)
	}
	_, errs := s.Admit(context.Background(), grid(10, 20), nil, "")
	got := errStrings(errs)
	if len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), "validation failed due to running out of cost budget, no further validation rules will be run") {
		t.Fatalf("errors = %v, want the cost budget error", got)
	}
}

// rowCost is the runtime cost of the rule on one row of 20 cells.
func rowCost(t *testing.T, s *Schema) int64 {
	t.Helper()
	obj := grid(1, 20)
	_, remaining := s.celValidator.Validate(context.Background(), nil, s.structural, obj.Object, nil, celenv.RuntimeBudget)
	return celenv.RuntimeBudget - remaining
}

// TestSharedEnvironment: the apiextensions validators look up the base
// environment themselves; it must be the very set celenv.Base returns,
// so CRD rules and admission policies compile in one environment.
func TestSharedEnvironment(t *testing.T) {
	if environment.MustBaseEnvSet(environment.DefaultCompatibilityVersion()) != celenv.Base() {
		t.Fatal("apiextensions' base environment is not celenv.Base()")
	}
}
