package authz

import "github.com/meridian-cp/meridian/lib/kube/rbac/rbactest"

// The tests' terse RBAC objects and attributes (lib/kube/rbac/rbactest).
var (
	clusterRole        = rbactest.ClusterRole
	role               = rbactest.Role
	clusterRoleBinding = rbactest.ClusterRoleBinding
	roleBinding        = rbactest.RoleBinding
	who                = rbactest.Who
	in                 = rbactest.In
	resourceRequest    = rbactest.ResourceRequest
	urlRequest         = rbactest.URLRequest
	rule               = rbactest.Rule
	urlRule            = rbactest.URLRule
	s                  = rbactest.S
)
