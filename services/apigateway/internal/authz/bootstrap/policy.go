// Package bootstrap holds the default ClusterRoles and
// ClusterRoleBindings kube-apiserver creates at start (its bootstrap
// policy), and reconciles the stored objects with them when a gateway
// starts.
//
// The roles and their rules are upstream's, as written (rules on kinds
// meridian does not serve included, so that a role means what it means
// on any cluster), for the roles of an API server and its users:
// cluster-admin; discovery, health and version for everyone
// (system:discovery, system:public-info-viewer); system:basic-user (the
// self reviews); admin, edit and view, filled by aggregation from the
// system:aggregate-to-* roles and any role labelled like them;
// system:monitoring, system:auth-delegator, system:kube-aggregator,
// system:kube-controller-manager, system:kube-dns,
// system:service-account-issuer-discovery; and the role of the ClusterRole
// aggregation controller. The roles of nodes, kubelets, the scheduler
// and certificate approval are left out: meridian runs none of them.
package bootstrap

import (
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Verbs of upstream's policy.
var (
	write     = []string{"create", "update", "patch", "delete", "deletecollection"}
	readWrite = []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
	read      = []string{"get", "list", "watch"}
)

// Groups of upstream's policy.
const (
	legacyGroup         = ""
	appsGroup           = "apps"
	authenticationGroup = "authentication.k8s.io"
	authorizationGroup  = "authorization.k8s.io"
	autoscalingGroup    = "autoscaling"
	batchGroup          = "batch"
	coordinationGroup   = "coordination.k8s.io"
	discoveryGroup      = "discovery.k8s.io"
	eventsGroup         = "events.k8s.io"
	extensionsGroup     = "extensions"
	networkingGroup     = "networking.k8s.io"
	policyGroup         = "policy"
	rbacGroup           = rbacv1.GroupName
	admissionGroup      = "admissionregistration.k8s.io"
)

// Labels and annotations of every bootstrap object.
const (
	// BootstrappingLabel marks the objects of the bootstrap policy.
	BootstrappingLabel = "kubernetes.io/bootstrapping"
	// AggregateToAdmin, AggregateToEdit and AggregateToView are the labels
	// that aggregate a ClusterRole's rules into admin, edit and view.
	AggregateToAdmin = "rbac.authorization.k8s.io/aggregate-to-admin"
	AggregateToEdit  = "rbac.authorization.k8s.io/aggregate-to-edit"
	AggregateToView  = "rbac.authorization.k8s.io/aggregate-to-view"
)

// AggregationController is the identity of the ClusterRole aggregation
// controller; the bootstrap policy lets it "escalate" ClusterRoles.
const AggregationController = "system:serviceaccount:kube-system:clusterrole-aggregation-controller"

// ruleBuilder makes a policy rule with its lists sorted, as upstream's
// rule builder stores them.
type ruleBuilder struct{ r rbacv1.PolicyRule }

func newRule(verbs ...string) *ruleBuilder {
	return &ruleBuilder{r: rbacv1.PolicyRule{Verbs: slices.Clone(verbs)}}
}

func (b *ruleBuilder) groups(g ...string) *ruleBuilder {
	b.r.APIGroups = append(b.r.APIGroups, g...)
	return b
}

func (b *ruleBuilder) resources(r ...string) *ruleBuilder {
	b.r.Resources = append(b.r.Resources, r...)
	return b
}

func (b *ruleBuilder) names(n ...string) *ruleBuilder {
	b.r.ResourceNames = append(b.r.ResourceNames, n...)
	return b
}

func (b *ruleBuilder) urls(u ...string) *ruleBuilder {
	b.r.NonResourceURLs = append(b.r.NonResourceURLs, u...)
	return b
}

func (b *ruleBuilder) rule() rbacv1.PolicyRule {
	for _, l := range [][]string{b.r.Verbs, b.r.APIGroups, b.r.Resources, b.r.ResourceNames, b.r.NonResourceURLs} {
		slices.Sort(l)
	}
	return b.r
}

func eventsRule() rbacv1.PolicyRule {
	return newRule("create", "update", "patch").groups(legacyGroup, eventsGroup).resources("events").rule()
}

func aggregated(selectorLabel string) *rbacv1.AggregationRule {
	return &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{selectorLabel: "true"}}}}
}

// ClusterRoles returns the bootstrap ClusterRoles, labelled
// kubernetes.io/bootstrapping=rbac-defaults and annotated for automatic
// update, as kube-apiserver creates them.
func ClusterRoles() []rbacv1.ClusterRole {
	roles := []rbacv1.ClusterRole{
		{
			// A "root" role which can do absolutely anything.
			ObjectMeta: metav1.ObjectMeta{Name: "cluster-admin"},
			Rules: []rbacv1.PolicyRule{
				newRule("*").groups("*").resources("*").rule(),
				newRule("*").urls("*").rule(),
			},
		},
		{
			// Enough to learn whether the server is ready and which APIs it serves.
			ObjectMeta: metav1.ObjectMeta{Name: "system:discovery"},
			Rules: []rbacv1.PolicyRule{
				newRule("get").urls("/livez", "/readyz", "/healthz", "/version", "/version/",
					"/openapi", "/openapi/*", "/api", "/api/*", "/apis", "/apis/*").rule(),
			},
		},
		{
			// Read access to the monitoring endpoints, the individual health checks included.
			ObjectMeta: metav1.ObjectMeta{Name: "system:monitoring"},
			Rules: []rbacv1.PolicyRule{
				newRule("get").urls("/metrics", "/metrics/slis", "/livez", "/readyz", "/healthz", "/livez/*", "/readyz/*", "/healthz/*").rule(),
			},
		},
		{
			// What a "normal" user needs to learn about themselves.
			ObjectMeta: metav1.ObjectMeta{Name: "system:basic-user"},
			Rules: []rbacv1.PolicyRule{
				newRule("create").groups(authorizationGroup).resources("selfsubjectaccessreviews", "selfsubjectrulesreviews").rule(),
				newRule("create").groups(authenticationGroup).resources("selfsubjectreviews").rule(),
			},
		},
		{
			// Insensitive cluster information, for everyone, the anonymous user included.
			ObjectMeta: metav1.ObjectMeta{Name: "system:public-info-viewer"},
			Rules: []rbacv1.PolicyRule{
				newRule("get").urls("/livez", "/readyz", "/healthz", "/version", "/version/").rule(),
			},
		},
		{
			// A namespace's administrator: edit, plus granting permissions in the namespace.
			ObjectMeta:      metav1.ObjectMeta{Name: "admin"},
			AggregationRule: aggregated(AggregateToAdmin),
		},
		{
			// Every user-level action in a namespace, but none on "privileged" resources
			// (status subresources, quotas and limits, roles and bindings).
			ObjectMeta:      metav1.ObjectMeta{Name: "edit", Labels: map[string]string{AggregateToAdmin: "true"}},
			AggregationRule: aggregated(AggregateToEdit),
		},
		{
			// Read-only access to the non-escalating resources of a namespace.
			ObjectMeta:      metav1.ObjectMeta{Name: "view", Labels: map[string]string{AggregateToEdit: "true"}},
			AggregationRule: aggregated(AggregateToView),
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "system:aggregate-to-admin", Labels: map[string]string{AggregateToAdmin: "true"}},
			Rules: []rbacv1.PolicyRule{
				newRule("create").groups(authorizationGroup).resources("localsubjectaccessreviews").rule(),
				newRule(readWrite...).groups(rbacGroup).resources("roles", "rolebindings").rule(),
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "system:aggregate-to-edit", Labels: map[string]string{AggregateToEdit: "true"}},
			Rules: []rbacv1.PolicyRule{
				// Read on escalating resources.
				newRule(read...).groups(legacyGroup).resources("pods/attach", "pods/proxy", "pods/exec", "pods/portforward", "secrets", "services/proxy").rule(),
				newRule("impersonate").groups(legacyGroup).resources("serviceaccounts").rule(),
				newRule(write...).groups(legacyGroup).resources("pods", "pods/attach", "pods/proxy", "pods/exec", "pods/portforward").rule(),
				newRule("create").groups(legacyGroup).resources("pods/eviction").rule(),
				newRule(write...).groups(legacyGroup).resources("replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts",
					"services", "services/proxy", "persistentvolumeclaims", "configmaps", "secrets", "events").rule(),
				newRule("create").groups(legacyGroup).resources("serviceaccounts/token").rule(),
				newRule(write...).groups(appsGroup).resources("statefulsets", "statefulsets/scale", "daemonsets",
					"deployments", "deployments/scale", "deployments/rollback", "replicasets", "replicasets/scale").rule(),
				newRule(write...).groups(autoscalingGroup).resources("horizontalpodautoscalers").rule(),
				newRule(write...).groups(batchGroup).resources("jobs", "cronjobs").rule(),
				newRule(write...).groups(extensionsGroup).resources("daemonsets", "deployments", "deployments/scale", "deployments/rollback",
					"ingresses", "replicasets", "replicasets/scale", "replicationcontrollers/scale", "networkpolicies").rule(),
				newRule(write...).groups(policyGroup).resources("poddisruptionbudgets").rule(),
				newRule(write...).groups(networkingGroup).resources("networkpolicies", "ingresses").rule(),
				newRule(readWrite...).groups(coordinationGroup).resources("leases").rule(),
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "system:aggregate-to-view", Labels: map[string]string{AggregateToView: "true"}},
			Rules: []rbacv1.PolicyRule{
				newRule(read...).groups(legacyGroup).resources("pods", "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts",
					"services", "services/status", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "configmaps").rule(),
				newRule(read...).groups(legacyGroup).resources("limitranges", "resourcequotas", "bindings", "events",
					"pods/status", "resourcequotas/status", "namespaces/status", "replicationcontrollers/status", "pods/log").rule(),
				// Reading namespaces in a namespace reads that namespace: a sign of which namespaces one may use.
				newRule(read...).groups(legacyGroup).resources("namespaces").rule(),
				newRule(read...).groups(discoveryGroup).resources("endpointslices").rule(),
				newRule(read...).groups(appsGroup).resources("controllerrevisions", "statefulsets", "statefulsets/status", "statefulsets/scale",
					"daemonsets", "daemonsets/status", "deployments", "deployments/status", "deployments/scale",
					"replicasets", "replicasets/status", "replicasets/scale").rule(),
				newRule(read...).groups(autoscalingGroup).resources("horizontalpodautoscalers", "horizontalpodautoscalers/status").rule(),
				newRule(read...).groups(batchGroup).resources("jobs", "cronjobs", "cronjobs/status", "jobs/status").rule(),
				newRule(read...).groups(extensionsGroup).resources("daemonsets", "daemonsets/status", "deployments", "deployments/scale", "deployments/status",
					"ingresses", "ingresses/status", "replicasets", "replicasets/scale", "replicasets/status", "replicationcontrollers/scale",
					"networkpolicies").rule(),
				newRule(read...).groups(policyGroup).resources("poddisruptionbudgets", "poddisruptionbudgets/status").rule(),
				newRule(read...).groups(networkingGroup).resources("networkpolicies", "ingresses", "ingresses/status").rule(),
			},
		},
		{
			// Authentication and authorization delegation (extension API servers).
			ObjectMeta: metav1.ObjectMeta{Name: "system:auth-delegator"},
			Rules: []rbacv1.PolicyRule{
				newRule("create").groups(authenticationGroup).resources("tokenreviews").rule(),
				newRule("create").groups(authorizationGroup).resources("subjectaccessreviews").rule(),
			},
		},
		{
			// The API aggregator sees the services it points at.
			ObjectMeta: metav1.ObjectMeta{Name: "system:kube-aggregator"},
			Rules: []rbacv1.PolicyRule{
				newRule(read...).groups(legacyGroup).resources("services", "endpoints").rule(),
			},
		},
		{
			// kube-controller-manager's own identity: its shared informers, leader
			// election, and the service accounts and secrets of its controllers.
			ObjectMeta: metav1.ObjectMeta{Name: "system:kube-controller-manager"},
			Rules: []rbacv1.PolicyRule{
				eventsRule(),
				newRule("create").groups(coordinationGroup).resources("leases").rule(),
				newRule("get", "update").groups(coordinationGroup).resources("leases").names("kube-controller-manager").rule(),
				newRule("create").groups(legacyGroup).resources("secrets", "serviceaccounts").rule(),
				newRule("delete").groups(legacyGroup).resources("secrets").rule(),
				newRule("get").groups(legacyGroup).resources("namespaces", "secrets", "serviceaccounts", "configmaps").rule(),
				newRule("update").groups(legacyGroup).resources("secrets", "serviceaccounts").rule(),
				newRule("create").groups(authenticationGroup).resources("tokenreviews").rule(),
				newRule("create").groups(authorizationGroup).resources("subjectaccessreviews").rule(),
				newRule("list", "watch").groups("*").resources("*").rule(),
				newRule("create").groups(legacyGroup).resources("serviceaccounts/token").rule(),
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "system:kube-dns"},
			Rules: []rbacv1.PolicyRule{
				newRule("list", "watch").groups(legacyGroup).resources("endpoints", "services").rule(),
			},
		},
		{
			// The service account issuer's discovery documents, which other systems
			// read to verify service account tokens.
			ObjectMeta: metav1.ObjectMeta{Name: "system:service-account-issuer-discovery"},
			Rules: []rbacv1.PolicyRule{
				newRule("get").urls("/.well-known/openid-configuration", "/.well-known/openid-configuration/",
					"/openid/v1/jwks", "/openid/v1/jwks/").rule(),
			},
		},
		{
			// The ClusterRole aggregation controller rewrites aggregated roles'
			// rules, so it must be able to grant anything.
			ObjectMeta: metav1.ObjectMeta{Name: "system:controller:clusterrole-aggregation-controller"},
			Rules: []rbacv1.PolicyRule{
				newRule("escalate", "get", "list", "watch", "update", "patch").groups(rbacGroup).resources("clusterroles").rule(),
			},
		},
		{
			// The ValidatingAdmissionPolicy status controller reads policies
			// and writes their type-checking status.
			ObjectMeta: metav1.ObjectMeta{Name: "system:controller:validatingadmissionpolicy-status-controller"},
			Rules: []rbacv1.PolicyRule{
				newRule("get", "list", "watch").groups(admissionGroup).resources("validatingadmissionpolicies").rule(),
				newRule("get", "patch", "update").groups(admissionGroup).resources("validatingadmissionpolicies/status").rule(),
			},
		},
	}
	for i := range roles {
		addDefaultMetadata(&roles[i].ObjectMeta)
	}
	return roles
}

// ClusterRoleBindings returns the bootstrap ClusterRoleBindings, each
// named after the ClusterRole it binds.
func ClusterRoleBindings() []rbacv1.ClusterRoleBinding {
	group := func(name string) rbacv1.Subject {
		return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: name}
	}
	user := func(name string) rbacv1.Subject {
		return rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}
	}
	sa := func(namespace, name string) rbacv1.Subject {
		return rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}
	}
	bind := func(role string, subjects ...rbacv1.Subject) rbacv1.ClusterRoleBinding {
		b := rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   subjects,
		}
		addDefaultMetadata(&b.ObjectMeta)
		return b
	}
	return []rbacv1.ClusterRoleBinding{
		bind("cluster-admin", group("system:masters")),
		bind("system:monitoring", group("system:monitoring")),
		bind("system:discovery", group("system:authenticated")),
		bind("system:basic-user", group("system:authenticated")),
		bind("system:public-info-viewer", group("system:authenticated"), group("system:unauthenticated")),
		bind("system:kube-controller-manager", user("system:kube-controller-manager")),
		bind("system:kube-dns", sa("kube-system", "kube-dns")),
		// Every workload may read the service account issuer's discovery
		// documents; what they say is in its own token already.
		bind("system:service-account-issuer-discovery", group("system:serviceaccounts")),
		bind("system:controller:clusterrole-aggregation-controller", sa("kube-system", "clusterrole-aggregation-controller")),
		bind("system:controller:validatingadmissionpolicy-status-controller", sa("kube-system", "validatingadmissionpolicy-status-controller")),
	}
}

func addDefaultMetadata(m *metav1.ObjectMeta) {
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels[BootstrappingLabel] = "rbac-defaults"
	m.Annotations = map[string]string{rbacv1.AutoUpdateAnnotationKey: "true"}
}
