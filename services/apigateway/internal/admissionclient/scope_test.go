package admissionclient

import (
	"testing"

	admissionv1 "github.com/meridian-cp/meridian/proto/gen/meridian/admission/v1"
)

func TestScopeCovers(t *testing.T) {
	const (
		create = admissionv1.Operation_OPERATION_CREATE
		update = admissionv1.Operation_OPERATION_UPDATE
		del    = admissionv1.Operation_OPERATION_DELETE
	)
	type req struct {
		op                        admissionv1.Operation
		group, resource, subresrc string
	}
	tests := []struct {
		name  string
		scope *admissionv1.Scope
		in    []req
		out   []req
	}{
		{
			name:  "empty scope covers nothing",
			scope: &admissionv1.Scope{},
			out:   []req{{create, "", "configmaps", ""}, {del, "apps", "deployments", "scale"}},
		},
		{
			name:  "everything",
			scope: &admissionv1.Scope{Everything: true},
			in:    []req{{create, "", "configmaps", ""}, {del, "apps", "deployments", "scale"}},
		},
		{
			name:  "a rule of empty lists covers everything",
			scope: &admissionv1.Scope{Rules: []*admissionv1.ScopeRule{{}}},
			in:    []req{{update, "x.io", "widgets", "status"}},
		},
		{
			name: "operation, group and resource",
			scope: &admissionv1.Scope{Rules: []*admissionv1.ScopeRule{{
				Operations: []admissionv1.Operation{create, update}, ApiGroups: []string{"apps"}, Resources: []string{"deployments"},
			}}},
			in:  []req{{create, "apps", "deployments", ""}, {update, "apps", "deployments", ""}},
			out: []req{{del, "apps", "deployments", ""}, {create, "", "deployments", ""}, {create, "apps", "deployments", "scale"}, {create, "apps", "replicasets", ""}},
		},
		{
			name: "core group is the empty string",
			scope: &admissionv1.Scope{Rules: []*admissionv1.ScopeRule{{
				ApiGroups: []string{""}, Resources: []string{"configmaps"},
			}}},
			in:  []req{{create, "", "configmaps", ""}, {del, "", "configmaps", ""}},
			out: []req{{create, "x.io", "configmaps", ""}},
		},
		{
			name: "star covers resources, not subresources",
			scope: &admissionv1.Scope{Rules: []*admissionv1.ScopeRule{{
				ApiGroups: []string{"*"}, Resources: []string{"*"},
			}}},
			in:  []req{{create, "", "configmaps", ""}, {update, "apps", "deployments", ""}},
			out: []req{{update, "", "pods", "status"}},
		},
		{
			name: "subresource patterns",
			scope: &admissionv1.Scope{Rules: []*admissionv1.ScopeRule{{
				Resources: []string{"pods/*", "*/scale", "services/status"},
			}}},
			in: []req{
				{update, "", "pods", ""}, {update, "", "pods", "status"}, {update, "", "pods", "eviction"},
				{update, "apps", "deployments", "scale"}, {update, "", "services", "status"},
			},
			out: []req{{update, "", "services", ""}, {update, "apps", "deployments", ""}, {update, "", "nodes", "status"}},
		},
		{
			name: "star-slash-star covers everything of its groups",
			scope: &admissionv1.Scope{Rules: []*admissionv1.ScopeRule{{
				ApiGroups: []string{"apps"}, Resources: []string{"*/*"},
			}}},
			in:  []req{{create, "apps", "deployments", ""}, {update, "apps", "statefulsets", "scale"}},
			out: []req{{create, "", "configmaps", ""}},
		},
		{
			name: "any rule",
			scope: &admissionv1.Scope{Rules: []*admissionv1.ScopeRule{
				{Operations: []admissionv1.Operation{del}, Resources: []string{"namespaces"}},
				{ApiGroups: []string{"rbac.authorization.k8s.io"}},
			}},
			in:  []req{{del, "", "namespaces", ""}, {create, "rbac.authorization.k8s.io", "roles", ""}},
			out: []req{{create, "", "namespaces", ""}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := compile(tc.scope)
			for _, r := range tc.in {
				if !m.covers(r.op, r.group, r.resource, r.subresrc) {
					t.Errorf("%v not covered", r)
				}
			}
			for _, r := range tc.out {
				if m.covers(r.op, r.group, r.resource, r.subresrc) {
					t.Errorf("%v covered", r)
				}
			}
		})
	}
}
