package celpolicy

import (
	"context"
	"slices"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// mastersAuthorizer backs the CEL `authorizer` variable. The admission
// service does not hold the gateways' RBAC view, so it answers only from
// the rule kube-apiserver applies before RBAC: members of system:masters
// may do anything. Everyone else gets no opinion (authorizer checks in
// policies report them not allowed), with a reason saying why.
type mastersAuthorizer struct{}

// Authorize allows system:masters and has no opinion on anyone else.
func (mastersAuthorizer) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if u := a.GetUser(); u != nil && slices.Contains(u.GetGroups(), user.SystemPrivilegedGroup) {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "the admission service answers authorizer checks only for system:masters", nil
}
