// Package apfbootstrap holds the mandatory and suggested API Priority and
// Fairness configuration objects (FlowSchemas and
// PriorityLevelConfigurations of flowcontrol.apiserver.k8s.io/v1), with
// kube-apiserver's names, precedences, shares, lendable percentages,
// queuing parameters and distinguishers, and the rules that decide who
// owns a stored one (Maintain). The gateway keeps them in the store; the
// flow-control service serves them until it has read the stored ones.
package apfbootstrap

import (
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AutoUpdateAnnotation decides who owns a suggested object's spec:
// "true" the servers, "false" the users (flowcontrolv1.AutoUpdateAnnotationKey).
const AutoUpdateAnnotation = flowcontrolv1.AutoUpdateAnnotationKey

// Names of the mandatory objects and of the suggested ones the service
// relies on.
const (
	Exempt        = flowcontrolv1.PriorityLevelConfigurationNameExempt
	CatchAll      = flowcontrolv1.PriorityLevelConfigurationNameCatchAll
	GlobalDefault = "global-default"
	Probes        = "probes"
)

// Well-known users and groups the suggested subjects name.
const (
	groupMasters         = "system:masters"
	groupNodes           = "system:nodes"
	groupAuthenticated   = "system:authenticated"
	groupUnauthenticated = "system:unauthenticated"
	groupServiceAccounts = "system:serviceaccounts"
	userControllerMgr    = "system:kube-controller-manager"
	userScheduler        = "system:kube-scheduler"
)

// MandatoryPriorityLevels are exempt and catch-all.
func MandatoryPriorityLevels() []*flowcontrolv1.PriorityLevelConfiguration {
	return []*flowcontrolv1.PriorityLevelConfiguration{
		priorityLevel(CatchAll, flowcontrolv1.PriorityLevelConfigurationSpec{
			Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: ptr(5), LendablePercent: ptr(0),
				LimitResponse: flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeReject},
			},
		}),
		priorityLevel(Exempt, flowcontrolv1.PriorityLevelConfigurationSpec{
			Type:   flowcontrolv1.PriorityLevelEnablementExempt,
			Exempt: &flowcontrolv1.ExemptPriorityLevelConfiguration{NominalConcurrencyShares: ptr(0), LendablePercent: ptr(0)},
		}),
	}
}

// MandatoryFlowSchemas are exempt (system:masters) and catch-all.
func MandatoryFlowSchemas() []*flowcontrolv1.FlowSchema {
	return []*flowcontrolv1.FlowSchema{
		flowSchema(Exempt, Exempt, 1, "", everything(groups(groupMasters))),
		flowSchema(CatchAll, CatchAll, 10000, flowcontrolv1.FlowDistinguisherMethodByUserType,
			everything(groups(groupUnauthenticated, groupAuthenticated))),
	}
}

// SuggestedPriorityLevels are system, node-high, leader-election,
// workload-high, workload-low and global-default.
func SuggestedPriorityLevels() []*flowcontrolv1.PriorityLevelConfiguration {
	return []*flowcontrolv1.PriorityLevelConfiguration{
		queuing("system", 30, 33, 64, 6),
		queuing("node-high", 40, 25, 64, 6),
		queuing("leader-election", 10, 0, 16, 4),
		queuing("workload-high", 40, 50, 128, 6),
		queuing("workload-low", 100, 90, 128, 6),
		queuing(GlobalDefault, 20, 50, 128, 6),
	}
}

// SuggestedFlowSchemas route nodes, leader election, the built-in
// controllers, service accounts, probes and everyone else.
func SuggestedFlowSchemas() []*flowcontrolv1.FlowSchema {
	byUser, byNamespace := flowcontrolv1.FlowDistinguisherMethodByUserType, flowcontrolv1.FlowDistinguisherMethodByNamespaceType
	all := resourceRule([]string{"*"}, []string{"*"}, []string{"*"}, true)
	return []*flowcontrolv1.FlowSchema{
		flowSchema("system-nodes", "system", 500, byUser, everything(groups(groupNodes))),
		flowSchema("system-node-high", "node-high", 400, byUser, flowcontrolv1.PolicyRulesWithSubjects{
			Subjects: groups(groupNodes),
			ResourceRules: []flowcontrolv1.ResourcePolicyRule{
				resourceRule([]string{"*"}, []string{""}, []string{"nodes", "nodes/status"}, true),
				resourceRule([]string{"*"}, []string{"coordination.k8s.io"}, []string{"leases"}, false),
			},
		}),
		flowSchema(Probes, Exempt, 2, "", flowcontrolv1.PolicyRulesWithSubjects{
			Subjects: groups(groupUnauthenticated, groupAuthenticated),
			NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{
				Verbs: []string{"get"}, NonResourceURLs: []string{"/healthz", "/readyz", "/livez"},
			}},
		}),
		flowSchema("system-leader-election", "leader-election", 100, byUser, flowcontrolv1.PolicyRulesWithSubjects{
			Subjects: append(users(userControllerMgr, userScheduler), kubeSystemServiceAccount()),
			ResourceRules: []flowcontrolv1.ResourcePolicyRule{
				resourceRule([]string{"get", "create", "update"}, []string{"coordination.k8s.io"}, []string{"leases"}, false),
			},
		}),
		flowSchema("kube-controller-manager", "workload-high", 800, byNamespace, everything(users(userControllerMgr))),
		flowSchema("kube-scheduler", "workload-high", 800, byNamespace, everything(users(userScheduler))),
		flowSchema("kube-system-service-accounts", "workload-high", 900, byNamespace,
			everything([]flowcontrolv1.Subject{kubeSystemServiceAccount()})),
		flowSchema("service-accounts", "workload-low", 9000, byUser, everything(groups(groupServiceAccounts))),
		flowSchema(GlobalDefault, GlobalDefault, 9900, byUser, flowcontrolv1.PolicyRulesWithSubjects{
			Subjects:         groups(groupUnauthenticated, groupAuthenticated),
			ResourceRules:    []flowcontrolv1.ResourcePolicyRule{all},
			NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
		}),
	}
}

// PriorityLevels are the mandatory and suggested priority levels.
func PriorityLevels() []*flowcontrolv1.PriorityLevelConfiguration {
	return append(MandatoryPriorityLevels(), SuggestedPriorityLevels()...)
}

// FlowSchemas are the mandatory and suggested flow schemas.
func FlowSchemas() []*flowcontrolv1.FlowSchema {
	return append(MandatoryFlowSchemas(), SuggestedFlowSchemas()...)
}

func ptr(v int32) *int32 { return &v }

func meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Annotations: map[string]string{AutoUpdateAnnotation: "true"}}
}

func priorityLevel(name string, spec flowcontrolv1.PriorityLevelConfigurationSpec) *flowcontrolv1.PriorityLevelConfiguration {
	return &flowcontrolv1.PriorityLevelConfiguration{ObjectMeta: meta(name), Spec: spec}
}

func queuing(name string, shares, lendable, queues, handSize int32) *flowcontrolv1.PriorityLevelConfiguration {
	return priorityLevel(name, flowcontrolv1.PriorityLevelConfigurationSpec{
		Type: flowcontrolv1.PriorityLevelEnablementLimited,
		Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
			NominalConcurrencyShares: ptr(shares), LendablePercent: ptr(lendable),
			LimitResponse: flowcontrolv1.LimitResponse{
				Type:    flowcontrolv1.LimitResponseTypeQueue,
				Queuing: &flowcontrolv1.QueuingConfiguration{Queues: queues, HandSize: handSize, QueueLengthLimit: 50},
			},
		},
	})
}

func flowSchema(name, level string, precedence int32, dm flowcontrolv1.FlowDistinguisherMethodType, rules ...flowcontrolv1.PolicyRulesWithSubjects) *flowcontrolv1.FlowSchema {
	fs := &flowcontrolv1.FlowSchema{ObjectMeta: meta(name), Spec: flowcontrolv1.FlowSchemaSpec{
		PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: level},
		MatchingPrecedence:         precedence,
		Rules:                      rules,
	}}
	if dm != "" {
		fs.Spec.DistinguisherMethod = &flowcontrolv1.FlowDistinguisherMethod{Type: dm}
	}
	return fs
}

// everything is the rule that matches every request of subjects.
func everything(subjects []flowcontrolv1.Subject) flowcontrolv1.PolicyRulesWithSubjects {
	return flowcontrolv1.PolicyRulesWithSubjects{
		Subjects:         subjects,
		ResourceRules:    []flowcontrolv1.ResourcePolicyRule{resourceRule([]string{"*"}, []string{"*"}, []string{"*"}, true)},
		NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
	}
}

func resourceRule(verbs, apiGroups, resources []string, clusterScope bool) flowcontrolv1.ResourcePolicyRule {
	return flowcontrolv1.ResourcePolicyRule{
		Verbs: verbs, APIGroups: apiGroups, Resources: resources,
		Namespaces: []string{"*"}, ClusterScope: clusterScope,
	}
}

func groups(names ...string) []flowcontrolv1.Subject {
	out := make([]flowcontrolv1.Subject, len(names))
	for i, n := range names {
		out[i] = flowcontrolv1.Subject{Kind: flowcontrolv1.SubjectKindGroup, Group: &flowcontrolv1.GroupSubject{Name: n}}
	}
	return out
}

func users(names ...string) []flowcontrolv1.Subject {
	out := make([]flowcontrolv1.Subject, len(names))
	for i, n := range names {
		out[i] = flowcontrolv1.Subject{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: n}}
	}
	return out
}

func kubeSystemServiceAccount() flowcontrolv1.Subject {
	return flowcontrolv1.Subject{
		Kind:           flowcontrolv1.SubjectKindServiceAccount,
		ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Namespace: "kube-system", Name: "*"},
	}
}
