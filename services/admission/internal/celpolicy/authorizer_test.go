package celpolicy

import "github.com/meridian-cp/meridian/lib/kube/rbac"

// mastersOnly is the RBAC authorizer of a cluster without RBAC objects:
// it allows system:masters and has no opinion on anyone else.
var mastersOnly = rbac.NewStatic()
